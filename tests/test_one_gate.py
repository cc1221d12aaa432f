"""One way for a tool call: the agent, a direct call (Tools.CallTool) and the MCP server hit the
same permission rule with the same outcome in each mode. What differs is only what asking
means for the caller: the agent shows a card and waits; a direct call (one request) is
refused with FAILED_PRECONDITION saying so; the MCP server answers an error result.

Two gates are walked: the generic one (`create-folder`, createFolder, decided before the tool
runs) and a tool's own (`build-workflow` updating a saved workflow, updateWorkflow, which the
tool decides itself and the MCP server exposes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from mcp import types

from instance_ai.v1 import agent_pb2
from server.settings import Settings
from tests.agent_fixtures import Chat, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.test_mcp_endpoint import http_session
from tests.tool_client import ToolClient, saved_workflow
from tests.workflow_json import chain, node

__all__ = ["model"]

MODES = ("always_allow", "require_approval", "blocked")
START = node("Start", "manualTrigger")
SHAPE = node("Shape", "set", 200, mode="manual", assignments={"assignments": []})
SOURCE = json.dumps(
    {"name": "Changed", "nodes": [START, SHAPE], "connections": chain("Start", "Shape")}
)


def of_result(result: dict[str, Any]) -> str:
    """A tool's answer: done, or blocked where the tool applied the rule itself."""
    remediation = result.get("remediation") or {}
    return "blocked" if remediation.get("reason") == "permission_blocked" else "done"


def of_refusal(message: str) -> str:
    """A call refused with a message: blocked, or asks (a person's answer was needed)."""
    if "blocked" in message:
        return "blocked"
    assert "approval" in message or "answer" in message, message
    return "asks"


async def direct(tools: ToolClient, name: str, arguments: dict[str, Any]) -> str:
    try:
        return of_result(await tools.call(name, **arguments))
    except grpc.aio.AioRpcError as error:
        assert error.code() is grpc.StatusCode.FAILED_PRECONDITION, error.details()
        return of_refusal(error.details() or "")


async def through_mcp(url: str, thread: str, name: str, arguments: dict[str, Any]) -> str:
    async with http_session(url, {"x-instance-ai-thread": thread}) as session:
        result = await session.call_tool(name, arguments)
    message = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
    if result.isError:
        return of_refusal(message)
    assert result.structuredContent is not None
    return of_result(dict(result.structuredContent))


async def through_agent(
    chat: Chat, model: FakeMessagesAPI, thread: str, name: str, arguments: dict[str, Any]
) -> str:
    """The model calls the tool: its card (asks), its refusal or its result."""

    def answer(request: dict[str, Any]) -> Turn:
        """The call, then (given its result) a last word."""
        last = request["messages"][-1]["content"]
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last):
            return text("Done.")
        return tool(name, arguments, call_id=f"toolu_{thread}")

    model.responder = answer
    run_id = await chat.send(thread, f"call {name}")

    def ended(event: dict[str, Any]) -> bool:
        payload = event["payload"]
        return event["type"] == "confirmation-request" or (
            event["type"] in ("tool-result", "tool-error")
            and payload.get("toolCallId") == f"toolu_{thread}"
        )

    last = (await chat.until(thread, ended, within=300))[-1]
    if last["type"] == "confirmation-request":
        await chat.agent.CancelRun(agent_pb2.CancelRunRequest(thread_id=thread))
        await chat.finished(thread, run_id)
        return "asks"
    await chat.finished(thread, run_id, within=120)
    if last["type"] == "tool-error":
        return of_refusal(last["payload"]["error"])
    return of_result(last["payload"]["result"])


@pytest.mark.parametrize("mode", MODES)
async def test_the_agent_a_direct_call_and_mcp_meet_the_same_gate(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI, mode: str
) -> None:
    settings = make_docker_settings(
        **with_model(model, permissions={"createFolder": mode, "updateWorkflow": mode}),
        http_port=0,
    )
    expected = {"always_allow": "done", "require_approval": "asks", "blocked": "blocked"}[mode]
    async with serving(settings) as (app, channel):
        chat = Chat(channel)
        url = f"{app.http_url}/mcp"
        seen: dict[str, str] = {}
        for front in ("direct", "mcp", "agent"):
            thread = f"gate-{front}"
            tools = ToolClient(channel, thread)
            workflow_id = await saved_workflow(app, thread, "Main", nodes=[START])
            await tools.call("workspace_write_file", path="src/main.json", content=SOURCE)
            build = {"filePath": "src/main.json", "workflowId": workflow_id}
            if front == "direct":
                seen["direct build"] = await direct(tools, "build-workflow", build)
                seen["direct folder"] = await direct(tools, "create-folder", {"name": "Reports"})
            elif front == "mcp":
                seen["mcp build"] = await through_mcp(url, thread, "build-workflow", build)
            else:
                seen["agent build"] = await through_agent(
                    chat, model, thread, "build-workflow", build
                )
                seen["agent folder"] = await through_agent(
                    chat, model, f"{thread}-folder", "create-folder", {"name": "Reports"}
                )
            if expected != "done":  # nothing a refused or waiting build would change did
                saved = await app.parts.instance.workflows.get(workflow_id)
                assert saved is not None and saved.name == "Main"
    assert seen == dict.fromkeys(seen, expected)
    assert len(seen) == 5
    assert model.rejected == []
