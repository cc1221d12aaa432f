"""The filesystem gateway against a real directory: paths stay under the root (no `..`, no
absolute paths, no symbolic link out), writes only with --write; and the whole path as a
person uses it: `instance-ai gateway` connects out, the user's threads get its tools (no
one else's do), each call is a `filesystem-request` event gated by readFilesystem, and when
the gateway goes its tools go and a call in flight fails at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from fs_gateway.connect import gateway_url
from fs_gateway.files import FileRoot, OutsideRoot, WriteNotAllowed
from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from server.settings import Settings
from tests.agent_fixtures import Chat, model, model_settings, nth_card, of_type, tool_result
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.mcp_fixtures import CLI, gateway_key, gateway_state, running_gateway, start_gateway
from tests.waiting import until

__all__ = ["model", "model_settings"]  # fixtures, shared


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A folder to share, with a way out planted in it, and a secret beside it."""
    root = tmp_path / "shared"
    (root / "reports").mkdir(parents=True)
    (root / "reports" / "q3.csv").write_text("region,total\nnorth,10\nsouth,32\n")
    (root / "notes.md").write_text("# Notes\nship the north report\n")
    (tmp_path / "secret.txt").write_text("the secret is 42\n")
    (root / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (root / "outside").symlink_to(tmp_path)
    return root


def test_paths_stay_under_the_root(shared: Path) -> None:
    files = FileRoot(shared)
    assert files.read("reports/q3.csv")["content"].splitlines()[1] == "north,10"
    for path in ("../secret.txt", "reports/../../secret.txt", "/etc/passwd", "escape.txt"):
        with pytest.raises(OutsideRoot):
            files.read(path)
    with pytest.raises(OutsideRoot):
        files.list("outside")
    listed = {e["path"]: e["type"] for e in files.list(".", recursive=True)["entries"]}
    assert listed["escape.txt"] == listed["outside"] == "symlink"
    assert "outside/secret.txt" not in listed  # links are listed, never followed
    found = files.search("secret|north")["matches"]
    assert [m["path"] for m in found] == ["notes.md", "reports/q3.csv"]
    with pytest.raises(WriteNotAllowed):
        files.write_text("new.txt", "x")
    assert not (shared / "new.txt").exists()

    writable = FileRoot(shared, write=True)
    assert writable.write_text("out/summary.txt", "42 in total")["bytes"] == 11
    assert (shared / "out" / "summary.txt").read_text() == "42 in total"
    for path in ("escape.txt", "outside/evil.txt", "../evil.txt"):
        with pytest.raises(OutsideRoot):
            writable.write_text(path, "overwritten")
    assert (shared.parent / "secret.txt").read_text() == "the secret is 42\n"
    assert not (shared.parent / "evil.txt").exists()


async def test_the_agent_reads_the_users_files_through_the_gateway(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI, shared: Path
) -> None:
    model.script(
        tool("read_file", {"path": "reports/q3.csv"}, call_id="c_read"),
        tool("read_file", {"path": "../secret.txt"}, call_id="c_escape"),
        tool("write_file", {"path": "x.txt", "content": "x"}, call_id="c_write"),
        text("north 10, south 32"),
        text("the gateway is gone"),
    )
    async with serving(model_settings(http_port=0)) as (_app, channel):
        chat = Chat(channel)
        async with running_gateway(channel, shared) as gateway:
            state = await gateway_state(channel)
            assert state.root_path == str(shared) and not state.write_access
            assert sorted(state.tools) == ["file_info", "list_files", "read_file", "search_files"]
            run = await chat.send("t", "what is in my Q3 report?")
            card = await nth_card(chat, "t", 1)
            # The reference's card for the person's own machine: deny, once, or the session.
            assert card["toolName"] == "read_file" and card["inputType"] == "resource-decision"
            decision = card["resourceDecision"]
            assert decision["options"] == ["denyOnce", "allowOnce", "allowForSession"]
            assert decision["toolGroup"] == "filesystem" and decision["resource"]
            await chat.confirm(
                "t", card["requestId"], kind="resourceDecision", resourceDecision="allowForSession"
            )
            events = await chat.finished("t", run)
            offered = {t["name"] for t in model.requests[0]["tools"]}
            assert {"read_file", "search_files"} <= offered and "write_file" not in offered
            read = from_json(tool_result(model, "c_read")["content"])
            assert "south,32" in read["content"][0]["text"]
            escape = tool_result(model, "c_escape")
            assert escape["is_error"] and "'..'" in escape["content"]
            assert "42" not in escape["content"]
            assert tool_result(model, "c_write")["is_error"]
            requests = of_type(events, "filesystem-request")
            assert [r["toolCall"] for r in requests] == [
                {"name": "read_file", "arguments": {"path": "reports/q3.csv"}},
                {"name": "read_file", "arguments": {"path": "../secret.txt"}},
            ]
            assert requests[0]["requestId"] != requests[1]["requestId"]
            # Another user's threads never get this user's gateway.
            stub = tools_pb2_grpc.ToolsStub(channel)
            theirs = await stub.ListTools(
                tools_pb2.ListToolsRequest(), metadata=(("x-instance-ai-user", "bob"),)
            )
            assert "read_file" not in {t.name for t in theirs.tools}
            gateway.terminate()
            await gateway.wait()

        async def disconnected() -> bool:
            return not (await gateway_state(channel)).connected

        await until(disconnected, "the gateway seen gone")
        run = await chat.send("t", "and now?")
        await chat.finished("t", run)
        assert "read_file" not in {t["name"] for t in model.requests[-1]["tools"]}


async def test_writes_need_write_and_a_call_in_flight_fails_when_the_gateway_goes(
    make_settings: Callable[..., Settings], shared: Path
) -> None:
    settings = make_settings(http_port=0, permissions={"readFilesystem": "always_allow"})
    async with serving(settings) as (_app, channel):
        stub = tools_pb2_grpc.ToolsStub(channel)

        async def call(name: str, **arguments: Any) -> dict[str, Any]:
            request = tools_pb2.CallToolRequest(
                thread_id="direct", tool_name=name, arguments_json=to_json(arguments)
            )
            return dict(from_json((await stub.CallTool(request)).result_json))

        async with running_gateway(channel, shared, write=True) as gateway:
            assert (await gateway_state(channel)).write_access
            written = await call("write_file", path="out/a.txt", content="hello")
            assert "out/a.txt" in written["content"][0]["text"]
            assert (shared / "out" / "a.txt").read_text() == "hello"
            with pytest.raises(grpc.aio.AioRpcError) as escape:
                await call("write_file", path="escape.txt", content="overwritten")
            assert "outside the root" in (escape.value.details() or "")
            assert (shared.parent / "secret.txt").read_text() == "the secret is 42\n"

            # Frozen mid-call, then gone: the call fails at once, not at its deadline.
            os.kill(gateway.pid, signal.SIGSTOP)
            pending = asyncio.ensure_future(call("list_files", path="."))
            await asyncio.sleep(0.5)
            assert not pending.done()
            os.kill(gateway.pid, signal.SIGKILL)
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await asyncio.wait_for(pending, 20)
            assert gone.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "went away" in (gone.value.details() or "")
            await gateway.wait()
        with pytest.raises(grpc.aio.AioRpcError) as absent:
            await call("list_files", path=".")
        assert absent.value.code() is grpc.StatusCode.NOT_FOUND

        # A new key ends the gateway connected with the last one: it says so and stops.
        async with running_gateway(channel, shared) as revoked:
            await gateway_key(channel)
            _, stderr = await asyncio.wait_for(revoked.communicate(), 30)
            assert revoked.returncode == 1 and b"key was replaced" in stderr
        # A replaced key is refused, and the gateway says so and stops (no retry loop).
        old_key, url = await gateway_key(channel)
        await gateway_key(channel)
        refused = await start_gateway(url, old_key, shared)
        _, stderr = await asyncio.wait_for(refused.communicate(), 30)
        assert refused.returncode == 1 and b"refused" in stderr


async def test_a_gateway_must_present_a_key_and_introduce_itself(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings(http_port=0)) as (_app, channel):
        key, url = await gateway_key(channel)
        endpoint = gateway_url(url)
        with pytest.raises(InvalidStatus) as no_key:
            async with connect(endpoint):
                pass
        assert no_key.value.response.status_code == 403
        headers = {"Authorization": f"Bearer {key}"}
        async with connect(endpoint, additional_headers=headers) as socket_:
            await socket_.send('{"rootPath": 7}')
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(socket_.recv(), 20)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert "introduce" in closed.value.rcvd.reason
        assert not (await gateway_state(channel)).connected


async def test_gateway_key_command_prints_the_key_and_how_to_use_it(
    make_settings: Callable[..., Settings],
) -> None:
    async def gateway_key_command(port: int) -> tuple[int, bytes, bytes]:
        process = await asyncio.create_subprocess_exec(
            CLI,
            "gateway-key",
            "--server",
            f"127.0.0.1:{port}",
            "--json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode is not None
        return process.returncode, out, err

    async with serving(make_settings(http_port=0)) as (app, _channel):
        code, out, _ = await gateway_key_command(app.port)
        created = json.loads(out)
        assert code == 0 and created["key"].startswith("iagw_")
        assert created["serverUrl"] == app.http_url
        assert f"--server {app.http_url}" in created["command"]
    async with serving(make_settings()) as (app, _channel):
        code, _, err = await gateway_key_command(app.port)
        assert code == 1 and b"INSTANCE_AI_HTTP_PORT" in err
