"""A test client for `Tools.CallTool`: call a tool as a caller, or expect a refusal."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from server.app import Application
from server.instance.types import WorkflowContent

Metadata = tuple[tuple[str, str], ...]


class ToolClient:
    def __init__(self, channel: grpc.aio.Channel, thread: str, who: Metadata = ()) -> None:
        self.stub = tools_pb2_grpc.ToolsStub(channel)
        self.thread = thread
        self.who = who

    def as_caller(self, who: Metadata) -> ToolClient:
        client = ToolClient.__new__(ToolClient)
        client.stub, client.thread, client.who = self.stub, self.thread, who
        return client

    async def call(self, tool_name: str, **arguments: Any) -> dict[str, Any]:
        response = await self.stub.CallTool(
            tools_pb2.CallToolRequest(
                thread_id=self.thread, tool_name=tool_name, arguments_json=to_json(arguments)
            ),
            metadata=self.who,
        )
        return from_json(response.result_json)

    async def refused(self, tool_name: str, **arguments: Any) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await self.call(tool_name, **arguments)
        return error.value


async def tabs_opened_by(tools: ToolClient, **click: Any) -> list[dict[str, Any]]:
    """Click with browser_click; the tabs the click opened (`newTabs`), which may be announced
    just after the click returns, so later actions are asked too."""
    new_tabs = (await tools.call("browser_click", **click)).get("newTabs") or []
    for _ in range(50):
        if new_tabs:
            break
        await asyncio.sleep(0.05)
        new_tabs = (await tools.call("browser_wait", predicate="true")).get("newTabs") or []
    return list(new_tabs)


async def saved_workflow(
    app: Application,
    thread: str,
    name: str,
    *,
    workflow_id: str | None = None,
    project_id: str | None = None,
    nodes: list[Any] | None = None,
    connections: dict[str, Any] | None = None,
) -> str:
    """A saved build, straight into the store (no sandbox: these tools work on the store)."""
    await app.parts.events.append(
        thread, "thread-title-updated", {"title": "test"}
    )  # the thread exists
    saved = await app.parts.instance.workflows.save_from_source(
        thread_id=thread,
        file_path=f"src/{name if workflow_id is None else 'same'}.workflow.ts",
        source_hash=name,
        content=WorkflowContent(
            name=name, nodes=nodes or [], connections=connections or {}, settings={}
        ),
        workflow_id=workflow_id,
        project_id=project_id,
    )
    return saved.id
