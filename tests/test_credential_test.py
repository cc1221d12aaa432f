"""test-credential: the type's declared test request, sent by the service under the SSRF
rules, against a local stand-in for the service (reached through the allow-list setting)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from aiohttp import web

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import credentials_pb2, credentials_pb2_grpc, tools_pb2, tools_pb2_grpc
from server.settings import Settings
from tests.conftest import serving

TOKEN = "ghp_PLANTED_0123456789abcdef"


class FakeGitHub:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/user", self._user)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def _user(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") == f"token {TOKEN}":
            return web.json_response({"login": "octo"})
        return web.json_response({"message": "Bad credentials"}, status=401)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def github() -> AsyncIterator[FakeGitHub]:
    server = FakeGitHub()
    await server.start()
    yield server
    await server.close()


async def create(channel: grpc.aio.Channel, kind: str, data: dict[str, Any]) -> str:
    created = await credentials_pb2_grpc.CredentialsStub(channel).CreateCredential(
        credentials_pb2.CreateCredentialRequest(
            name=f"my {kind}", type=kind, data_json=to_json(data)
        )
    )
    return str(created.credential.id)


async def check_credential(channel: grpc.aio.Channel, credential_id: str) -> dict[str, Any]:
    response = await tools_pb2_grpc.ToolsStub(channel).CallTool(
        tools_pb2.CallToolRequest(
            thread_id="t",
            tool_name="test-credential",
            arguments_json=to_json({"credentialId": credential_id}),
        )
    )
    return from_json(response.result_json)


async def test_the_declared_test_request_tells_good_from_bad(
    make_docker_settings: Callable[..., Settings], github: FakeGitHub
) -> None:
    settings = make_docker_settings(web_fetch_allow_hosts=[f"127.0.0.1:{github.port}"])
    server = f"http://127.0.0.1:{github.port}"
    async with serving(settings) as (app, channel):
        good = await create(channel, "githubApi", {"server": server, "accessToken": TOKEN})
        # The host needs the user's approval first (a direct call cannot ask).
        with pytest.raises(grpc.aio.AioRpcError) as unapproved:
            await check_credential(channel, good)
        assert unapproved.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert github.seen == []
        await app.parts.hitl.allow_domain("t", "127.0.0.1")
        bad = await create(channel, "githubApi", {"server": server, "accessToken": "ghp_wrong"})
        generic = await create(channel, "httpHeaderAuth", {"name": "X-Key", "value": TOKEN})
        inside = await create(
            channel, "githubApi", {"server": "http://127.0.0.1:9", "accessToken": TOKEN}
        )
        assert await check_credential(channel, good) == {
            "success": True,
            "message": "Connection tested successfully",
        }
        refused = await check_credential(channel, bad)
        assert refused == {
            "success": False,
            "message": "the service refused the credential (HTTP 401)",
        }
        untestable = await check_credential(channel, generic)
        assert (
            untestable["success"] is False and "declares no test request" in untestable["message"]
        )
        with pytest.raises(grpc.aio.AioRpcError) as ssrf:
            await check_credential(channel, inside)
        assert ssrf.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "internal address" in (ssrf.value.details() or "")
        assert TOKEN not in (ssrf.value.details() or "")
    assert github.seen == [f"token {TOKEN}", "token ghp_wrong"]
