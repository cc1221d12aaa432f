"""The deployment's MCP servers, real ones (tests/mcp_demo_server.py over stdio and over
Streamable HTTP): their tools reach the agent as `<server>__<tool>` with schemas a model
accepts, every call is gated by executeMcpTool ("always" per server), arguments are checked
against the real schema, results (text, structured, images, errors) come back as tool
results, and a server that dies mid-call yields a tool error, then comes back."""

from __future__ import annotations

import asyncio
import base64
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from server.mcp.naming import NameClaims
from server.settings import Settings, SettingsError, load_settings
from tests.agent_fixtures import Chat, model, model_settings, nth_card, of_type, tool_result
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.mcp_demo_server import PIXEL
from tests.mcp_fixtures import connected, demo_http, demo_stdio
from tests.waiting import until

__all__ = ["demo_http", "model", "model_settings"]  # fixtures, shared


async def test_an_agent_lists_calls_is_asked_and_survives_a_server_dying(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI, demo_http: str
) -> None:
    secret = "Bearer sekrit-header-value"
    settings = model_settings(
        mcp_servers={"demo": demo_stdio(), "web": {"url": demo_http, "headers": {"X-Key": secret}}}
    )
    model.script(
        tool("mcp-servers", {}, call_id="c_list"),
        tool("demo__add", {"numbers": {"a": 2, "b": 3}, "mode": "product"}, call_id="c_denied"),
        tool("demo__add", {"numbers": {"a": 2, "b": 3}, "mode": "product"}, call_id="c_add"),
        tool("demo__add", {"numbers": {"a": "two", "b": 3}, "mode": "sum"}, call_id="c_bad"),
        tool("web__shape", {"kind": "square", "side": 3}, call_id="c_shape"),
        tool("demo__picture", {}, call_id="c_picture"),
        tool("demo__fail", {}, call_id="c_fail"),
        tool("demo__die", {}, call_id="c_die"),
        text("done"),
        tool("demo__add", {"numbers": {"a": 1, "b": 1}, "mode": "sum"}, call_id="c_again"),
        text("again"),
    )
    async with serving(settings) as (app, channel):
        await connected(app, "demo")
        await connected(app, "web")
        chat = Chat(channel)
        run = await chat.send("t", "use the MCP tools")

        card = await nth_card(chat, "t", 1)
        assert card["toolName"] == "demo__add" and card["inputType"] == "approval"
        await chat.confirm("t", card["requestId"], kind="approval", approved=False)
        card = await nth_card(chat, "t", 2)
        await chat.confirm("t", card["requestId"], kind="approval", approved=True, scope="session")
        # "Always" covered the demo server only: the other server asks.
        card = await nth_card(chat, "t", 3)
        assert card["toolName"] == "web__shape"
        await chat.confirm("t", card["requestId"], kind="approval", approved=True)
        events = await chat.finished("t", run)
        assert of_type(events, "run-finish")[-1] == {"status": "completed"}

        offered = {t["name"]: t for t in model.requests[0]["tools"]}
        assert {"mcp-servers", "demo__add", "demo__shape", "web__add", "web__shape"} <= set(offered)
        # The root union is flattened into one object the model can fill in.
        shape = offered["web__shape"]["input_schema"]
        assert shape["type"] == "object" and {"kind", "radius", "side"} <= set(shape["properties"])
        listing = from_json(tool_result(model, "c_list")["content"])
        states = {s["name"]: s for s in listing["servers"]}
        assert states["demo"]["state"] == states["web"]["state"] == "connected"
        assert "demo__add" in [t["name"] for t in states["demo"]["tools"]]
        assert secret not in to_json(listing)

        denied = tool_result(model, "c_denied")
        assert denied["is_error"] and "denied" in denied["content"]
        added = tool_result(model, "c_add")
        assert not added["is_error"] and "result=6" in added["content"]
        bad = tool_result(model, "c_bad")
        assert bad["is_error"] and "numbers.a" in bad["content"]
        area = from_json(tool_result(model, "c_shape")["content"])
        assert area["structuredContent"] == {"area": 9}
        picture = from_json(tool_result(model, "c_picture")["content"])["content"][0]
        assert picture["type"] == "image" and picture["bytes"] == len(PIXEL)
        assert base64.b64encode(PIXEL).decode() not in to_json(picture)  # by reference
        failed = tool_result(model, "c_fail")
        assert failed["is_error"] and "failed on purpose" in failed["content"]
        died = tool_result(model, "c_die")
        assert died["is_error"] and "went away" in died["content"]
        assert secret not in to_json({"events": [e["payload"] for e in await chat.events("t")]})

        # The dead server is started again; the thread's "always" still holds for it.
        await connected(app, "demo")
        again = await chat.send("t", "once more")
        events = await chat.finished("t", again)
        assert not of_type([e for e in events if e["run_id"] == again], "confirmation-request")
        assert "result=2" in tool_result(model, "c_again")["content"]


async def test_list_changes_deadlines_and_blocked_calls(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings(
        mcp_servers={"demo": demo_stdio()},
        mcp_call_timeout_seconds=1,
        permissions={"executeMcpTool": "always_allow"},
    )
    async with serving(settings) as (app, channel):
        await connected(app, "demo")
        stub = tools_pb2_grpc.ToolsStub(channel)

        async def call(name: str, **arguments: Any) -> dict[str, Any]:
            request = tools_pb2.CallToolRequest(
                thread_id="direct", tool_name=name, arguments_json=to_json(arguments)
            )
            return dict(from_json((await stub.CallTool(request)).result_json))

        listed = await stub.ListTools(tools_pb2.ListToolsRequest())
        mcp_tools = {t.name: t for t in listed.tools if t.group == "mcp"}
        assert mcp_tools["demo__add"].hitl_action == "executeMcpTool"
        assert "demo__extra" not in mcp_tools
        await call("demo__grow")

        async def grown() -> bool:  # the server's list-changed notification is followed
            listed = await stub.ListTools(tools_pb2.ListToolsRequest())
            return "demo__extra" in {t.name for t in listed.tools}

        await until(grown, "the MCP server's new tool listed")
        assert (await call("demo__extra"))["content"] == [{"type": "text", "text": "extra works"}]

        with pytest.raises(grpc.aio.AioRpcError) as slow:
            await call("demo__slow", seconds=30)
        assert slow.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "did not answer within 1 s" in (slow.value.details() or "")
        # The server itself is fine afterwards.
        assert "result=3" in to_json(await call("demo__add", numbers={"a": 1, "b": 2}, mode="sum"))

    blocked = make_settings(
        mcp_servers={"demo": demo_stdio()}, permissions={"executeMcpTool": "blocked"}
    )
    async with serving(blocked) as (app, channel):
        await connected(app, "demo")
        stub = tools_pb2_grpc.ToolsStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CallTool(
                tools_pb2.CallToolRequest(
                    thread_id="direct",
                    tool_name="demo__add",
                    arguments_json=to_json({"numbers": {"a": 1, "b": 2}, "mode": "sum"}),
                )
            )
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION


async def test_a_server_that_cannot_start_is_reported_and_bad_settings_are_refused(
    make_settings: Callable[..., Settings],
) -> None:
    broken = {"command": [sys.executable, "-c", "import sys; sys.exit(5)"]}
    settings = make_settings(
        mcp_servers={"broken": broken}, permissions={"executeMcpTool": "always_allow"}
    )
    async with serving(settings) as (app, channel):
        for _ in range(200):
            states = app.parts.mcp_servers.states()
            if states[0].state == "failed":
                break
            await asyncio.sleep(0.05)
        stub = tools_pb2_grpc.ToolsStub(channel)
        request = tools_pb2.CallToolRequest(
            thread_id="direct", tool_name="mcp-servers", arguments_json=to_json({})
        )
        listing = from_json((await stub.CallTool(request)).result_json)
        assert listing["servers"][0]["state"] in ("failed", "connecting")
        assert listing["servers"][0]["tools"] == []
    for bad, words in (
        ({"bad name!": broken}, "mcp_servers"),
        ({"x": {"command": []}}, "command"),
        ({"x": {"url": "ftp://example"}}, "url"),
    ):
        with pytest.raises(SettingsError) as refused:
            load_settings(mcp_servers=bad)
        assert words in str(refused.value)


async def test_mcp_tools_are_found_and_loaded_on_demand(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    settings = model_settings(
        mcp_servers={"demo": demo_stdio()},
        agent_deferred_tools=True,
        permissions={"executeMcpTool": "always_allow"},
    )
    model.script(
        tool("search_tools", {"query": "demo add numbers"}, call_id="c_search"),
        tool("load_tool", {"toolName": "demo__add"}, call_id="c_load"),
        tool("demo__add", {"numbers": {"a": 4, "b": 5}, "mode": "sum"}, call_id="c_add"),
        text("9"),
    )
    async with serving(settings) as (app, channel):
        await connected(app, "demo")
        chat = Chat(channel)
        await chat.finished("t", await chat.send("t", "add 4 and 5 with the demo server"))
    first = {t["name"] for t in model.requests[0]["tools"]}
    assert "mcp-servers" in first and "demo__add" not in first
    found = from_json(tool_result(model, "c_search")["content"])
    assert "demo__add" in [r["name"] for r in found["results"]]
    assert "demo__add" in {t["name"] for t in model.requests[2]["tools"]}
    assert "result=9" in tool_result(model, "c_add")["content"]


def test_tool_names_are_valid_unique_and_never_shadow_the_services() -> None:
    claims = NameClaims({"search-nodes", "build-workflow"})
    first = claims.claim_prefixed("a", "b__c")
    second = claims.claim_prefixed("a__b", "c")  # the same name: made unique, stably
    assert first == "a__b__c" and second != first and second.startswith("a__b__c_")
    assert NameClaims(set()).claim_prefixed("a__b", "c") == "a__b__c"
    long = claims.claim_prefixed("srv", "x" * 100 + " with spaces/and:colons")
    assert len(long) <= 64 and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", long)
    # A gateway's tools keep their names, unless invalid or like one of the service's.
    assert claims.claim_exact("read_file") == "read_file"
    assert claims.claim_exact("Search_Nodes") is None
    assert claims.claim_exact("read file") is None


def test_mcp_servers_come_from_the_config_file_too(tmp_path: Path) -> None:
    config = tmp_path / "instance-ai.toml"
    config.write_text(
        '[mcp_servers.demo]\ncommand = ["python", "-m", "demo"]\nenv = { TOKEN = "t0ken" }\n'
        '[mcp_servers.web]\nurl = "http://127.0.0.1:9/mcp"\n'
    )
    settings = load_settings(config_file=config)
    assert settings.mcp_servers["demo"].command == ["python", "-m", "demo"]  # type: ignore[union-attr]
    assert "t0ken" not in repr(settings)
