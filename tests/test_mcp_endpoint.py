"""The service as an MCP server, driven by the SDK's own client: over Streamable HTTP (the
`/mcp` endpoint, behind the API keys) and over stdio (`instance-ai mcp`, which relays to
it). Each MCP session works in its own thread and sandbox: write a workflow file, build,
verify, read the claim, search nodes."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from instance_ai.json_text import from_json
from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from server.api.mcp_server import EXPOSED_TOOLS
from server.settings import Settings
from tests.agent_fixtures import STREAMED
from tests.conftest import serving
from tests.mcp_fixtures import CLI, ROOT
from tests.workflow_json import chain, node

SOURCE = json.dumps(
    {
        "name": "Greeting",
        "nodes": [
            node("Start", "manualTrigger"),
            node(
                "Greet",
                "set",
                200,
                mode="manual",
                assignments={
                    "assignments": [
                        {"id": "a", "name": "hello", "value": "world", "type": "string"}
                    ]
                },
            ),
        ],
        "connections": chain("Start", "Greet"),
    }
)


@asynccontextmanager
async def http_session(url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(name, arguments)
    text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
    assert not result.isError, text
    assert result.structuredContent is not None
    return dict(result.structuredContent)


async def test_an_mcp_client_builds_and_verifies_in_its_own_thread(
    make_docker_settings: Callable[..., Settings],
) -> None:
    settings = make_docker_settings(http_port=0, api_keys="k-mcp-test")
    async with serving(settings) as (app, channel):
        url = f"{app.http_url}/mcp"
        async with httpx.AsyncClient() as plain:
            refused = await plain.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401 and "API key" in refused.json()["error"]

        headers = {"Authorization": "Bearer k-mcp-test", "x-instance-ai-user": "ana"}
        async with http_session(url, headers) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == set(EXPOSED_TOOLS)
            assert tools["build-workflow"].inputSchema["type"] == "object"
            written = await call(
                session, "workspace_write_file", path="src/greet.json", content=SOURCE
            )
            thread = written["threadId"]
            built = await call(session, "build-workflow", filePath="src/greet.json")
            assert built["success"] and built["threadId"] == thread
            verified = await call(
                session,
                "verify-built-workflow",
                workflowId=built["workflowId"],
                workItemId=built["workItemId"],
            )
            assert verified["success"], verified
            claim = await call(session, "get-work-item", workItemId=built["workItemId"])
            assert claim["workflowId"] == built["workflowId"]
            found = await call(session, "search-nodes", query="set fields")
            assert "n8n-nodes-base.set" in json.dumps(found)
            bad = await session.call_tool("build-workflow", {"filePath": 7})
            assert bad.isError and "filePath" in bad.content[0].text  # type: ignore[union-attr]
            unknown = await session.call_tool("delete-workflow", {"workflowId": "x"})
            assert unknown.isError and "no tool" in unknown.content[0].text  # type: ignore[union-attr]

        # Another session: another thread, and none of the first one's files.
        async with http_session(url, headers) as other:
            missing = await other.call_tool("workspace_read_file", {"path": "src/greet.json"})
            assert missing.isError
        stream = agent_pb2_grpc.AgentStub(channel).StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id=thread),
            metadata=(("authorization", "Bearer k-mcp-test"),),
        )
        events = [response.event async for response in stream]
        STREAMED.extend(events)  # checked against n8n's event contract
        calls = [from_json(e.payload_json) for e in events if e.type == "tool-call"]
        assert [c["toolName"] for c in calls] == [
            "workspace_write_file",
            "build-workflow",
            "verify-built-workflow",
            "get-work-item",
            "search-nodes",
        ]


async def test_instance_ai_mcp_serves_the_same_tools_over_stdio(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings(http_port=0)) as (app, _channel):
        params = StdioServerParameters(
            command=CLI,
            args=["mcp", "--url", f"{app.http_url}/mcp", "--user", "ana"],
            env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")},
            cwd=str(ROOT),
        )
        async with (
            stdio_client(params, errlog=sys.stderr) as (read, write),
            ClientSession(read, write) as session,
        ):
            started = await session.initialize()
            assert started.serverInfo.name == "instance-ai"
            assert "build-workflow" in (started.instructions or "")
            names = {t.name for t in (await session.list_tools()).tools}
            assert set(EXPOSED_TOOLS) - {"search-nodes", "get-node-description"} <= names
            result = await session.call_tool("build-workflow", {"filePath": 7})
            assert result.isError and "filePath" in result.content[0].text  # type: ignore[union-attr]
