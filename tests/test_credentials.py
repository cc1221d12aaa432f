"""Credentials: sealed at rest, key rotation, the tools (metadata only), the picker card, and
a planted secret that must never surface in a result, an event, an error or a log line."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import credentials_pb2, credentials_pb2_grpc, tools_pb2, tools_pb2_grpc
from server.app import Application
from server.domain.credential_store import CredentialStore
from server.errors import UnavailableError
from server.settings import Settings
from server.wiring import credential_store
from tests.agent_fixtures import Chat, last_tool_results, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool

__all__ = ["model"]  # fixtures, shared

SECRET = "xoxb-PLANTED-7f3a9c1e55d04b"
ALLOW = {"deleteCredential": "always_allow"}


def embedded_store(app: Application) -> CredentialStore:
    """The embedded store behind the instance, for what only it offers (reveal, rekey)."""
    return credential_store(app.settings, app.parts.db)


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


class Client:
    def __init__(self, channel: grpc.aio.Channel, who: Any = ()) -> None:
        self.credentials = credentials_pb2_grpc.CredentialsStub(channel)
        self.tools = tools_pb2_grpc.ToolsStub(channel)
        self.who = who

    async def create(self, name: str, kind: str = "slackApi", secret: str = SECRET) -> str:
        created = await self.credentials.CreateCredential(
            credentials_pb2.CreateCredentialRequest(
                name=name, type=kind, data_json=to_json({"accessToken": secret})
            ),
            metadata=self.who,
        )
        return str(created.credential.id)

    async def call(self, tool_name: str, **arguments: Any) -> dict[str, Any]:
        response = await self.tools.CallTool(
            tools_pb2.CallToolRequest(
                thread_id="c1", tool_name=tool_name, arguments_json=to_json(arguments)
            ),
            metadata=self.who,
        )
        return from_json(response.result_json)


async def test_secrets_are_sealed_at_rest_and_tools_see_metadata_only(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = make_settings(permissions=ALLOW)
    async with serving(settings) as (app, channel):
        client = Client(channel)
        credential = await client.create("Team Slack")
        listed = await client.call("list-credentials")
        assert [c["name"] for c in listed["credentials"]] == ["Team Slack"]
        assert set(listed["credentials"][0]) == {"id", "name", "type", "createdAt", "updatedAt"}
        assert (await client.call("list-credentials", type="notionApi"))["credentials"] == []
        got = await client.call("get-credential", credentialId=credential)
        assert got["type"] == "slackApi" and got["nodesWithAccess"] == []
        assert await embedded_store(app).reveal(credential) == {"accessToken": SECRET}
        await client.credentials.UpdateCredential(
            credentials_pb2.UpdateCredentialRequest(
                credential_id=credential, data_json=to_json({"accessToken": SECRET + "-2"})
            )
        )
        assert await embedded_store(app).reveal(credential) == {"accessToken": SECRET + "-2"}
    database = (settings.data_dir / "instance-ai.db").read_bytes()
    wal = settings.data_dir / "instance-ai.db-wal"
    stored = database + (wal.read_bytes() if wal.exists() else b"")
    assert SECRET.encode() not in stored and b"Team Slack" in stored
    key_file = settings.data_dir / "credentials.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


async def test_rotation_keeps_old_credentials_readable_then_rekeys(
    make_settings: Callable[..., Settings],
) -> None:
    old, new = new_key(), new_key()
    async with serving(make_settings(credentials_key=old)) as (_app, channel):
        credential = await Client(channel).create("Slack")
    rotated = make_settings(credentials_key=new, credentials_previous_keys=old)
    async with serving(rotated) as (app, _channel):
        assert await embedded_store(app).reveal(credential) == {"accessToken": SECRET}
        assert await embedded_store(app).rekey() == 1
        assert await embedded_store(app).rekey() == 0
    async with serving(make_settings(credentials_key=new)) as (app, _channel):
        assert await embedded_store(app).reveal(credential) == {"accessToken": SECRET}
    async with serving(make_settings(credentials_key=old)) as (app, _channel):
        with pytest.raises(UnavailableError) as wrong:
            await embedded_store(app).reveal(credential)
        assert "INSTANCE_AI_CREDENTIALS_PREVIOUS_KEYS" in str(wrong.value)


async def test_credentials_of_other_projects_and_bad_input(
    make_settings: Callable[..., Settings],
) -> None:
    alice = (("x-instance-ai-user", "alice"), ("x-instance-ai-project", "a"))
    bob = (("x-instance-ai-user", "bob"), ("x-instance-ai-project", "b"))
    async with serving(make_settings(permissions=ALLOW)) as (_app, channel):
        mine = await Client(channel, alice).create("Alice Slack")
        theirs = Client(channel, bob)
        assert (await theirs.call("list-credentials"))["credentials"] == []
        for tool_name in ("get-credential", "delete-credential"):
            with pytest.raises(grpc.aio.AioRpcError) as hidden:
                await theirs.call(tool_name, credentialId=mine)
            assert hidden.value.code() is grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as update:
            await theirs.credentials.UpdateCredential(
                credentials_pb2.UpdateCredentialRequest(
                    credential_id=mine, data_json=to_json({"a": "b"})
                ),
                metadata=bob,
            )
        assert update.value.code() is grpc.StatusCode.NOT_FOUND
        for name, kind, data, says in [
            ("", "slackApi", {"a": "b"}, "name"),
            ("x", "not a type!", {"a": "b"}, "type"),
            ("x", "slackApi", {}, "data"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await theirs.credentials.CreateCredential(
                    credentials_pb2.CreateCredentialRequest(
                        name=name, type=kind, data_json=to_json(data)
                    ),
                    metadata=bob,
                )
            assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT and says in (
                bad.value.details() or ""
            )
        assert await Client(channel, alice).call("delete-credential", credentialId=mine) == {
            "success": True
        }


async def test_setup_picks_the_only_one_asks_otherwise_and_never_leaks(
    make_settings: Callable[..., Settings],
    model: FakeMessagesAPI,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving(make_settings(**with_model(model))) as (_app, channel):
        client = Client(channel)
        slack = await client.create("Slack")
        header_a = await client.create("API A", "httpHeaderAuth", SECRET + "-a")
        await client.create("API B", "httpHeaderAuth", SECRET + "-b")
        model.script(
            tool("setup-credentials", {"credentialType": "slackApi"}),
            tool("setup-credentials", {"credentialType": "httpHeaderAuth"}),
            tool("get-credential", {"credentialId": slack}),
            text("All set."),
        )
        chat = Chat(channel)
        run_id = await chat.send("c1", "connect slack and the API")
        card = await chat.card("c1")
        request = card["credentialRequests"][0]
        assert request["credentialType"] == "httpHeaderAuth"
        assert sorted(c["name"] for c in request["existingCredentials"]) == ["API A", "API B"]
        await chat.confirm(
            "c1",
            card["requestId"],
            kind="credentialSelection",
            credentials={"httpHeaderAuth": header_a},
        )
        events = await chat.finished("c1", run_id)
    auto = json.loads(last_tool_results(model.requests[1])[0]["content"])
    assert auto == {
        "credentialId": slack,
        "credentialType": "slackApi",
        "autoSelected": True,
        "skipped": False,
    }
    picked = json.loads(last_tool_results(model.requests[2])[0]["content"])
    assert picked["credentialId"] == header_a and picked["autoSelected"] is False
    # The planted secret is nowhere: not in what the model was sent, the events, or the logs.
    await asyncio.sleep(0)
    surfaces = [
        json.dumps(model.requests),
        json.dumps(events),
        caplog.text,
        "".join(capfd.readouterr()),
    ]
    for surface in surfaces:
        assert "PLANTED" not in surface
