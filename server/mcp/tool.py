"""`mcp-servers`: what the agent has from outside the service — the deployment's MCP servers
(state, tools) and the calling user's filesystem gateway — and a way to retry a server now."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from server.errors import NotFoundError
from server.mcp.gateway import Gateways
from server.mcp.servers import McpServers
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "McpTools"]

GROUP = "mcp"


@dataclass(frozen=True, kw_only=True)
class McpTools:
    servers: McpServers
    gateways: Gateways
    # The HTTP endpoint (where gateways connect) is on.
    gateways_enabled: bool


class McpServersInput(ToolModel):
    reconnect: str | None = Field(
        None, description="name of a server that is not connected: try it again now"
    )


class RemoteToolInfo(ToolModel):
    name: str
    description: str


class ServerInfo(ToolModel):
    name: str
    transport: str
    state: str
    error: str | None = None
    retry_in_seconds: float | None = Field(None, alias="retryInSeconds")
    tools: list[RemoteToolInfo]


class McpServersOutput(ToolModel):
    servers: list[ServerInfo]
    filesystem_gateway: dict[str, Any] | None = Field(None, alias="filesystemGateway")
    note: str


async def mcp_servers(ctx: ToolContext[McpTools], args: McpServersInput) -> McpServersOutput:
    servers = ctx.services.servers
    if args.reconnect is not None:
        if args.reconnect not in {s.name for s in servers.states()}:
            names = ", ".join(s.name for s in servers.states()) or "none"
            raise NotFoundError(f"there is no MCP server {args.reconnect!r}; configured: {names}")
        servers.reconnect(args.reconnect)
    tools_by_server: dict[str, list[RemoteToolInfo]] = {}
    for server, spec in servers.tools_by_server():
        tools_by_server.setdefault(server, []).append(
            RemoteToolInfo(name=spec.name, description=spec.description)
        )
    now = time.time()
    infos = [
        ServerInfo(
            name=state.name,
            transport=state.transport,
            state=state.state,
            error=state.error,
            retry_in_seconds=round(max(0.0, state.retry_at - now), 1)
            if state.retry_at is not None
            else None,
            tools=tools_by_server.get(state.name, []) if state.state == "connected" else [],
        )
        for state in servers.states()
    ]
    gateway = ctx.services.gateways.of(ctx.caller.user_id)
    note = (
        "Call a server's tools by the names listed (load them with load_tool first if they "
        "are not among your tools); each call needs the user's approval unless allowed."
    )
    if gateway is None and ctx.services.gateways_enabled:
        note += " No filesystem gateway is connected: the user can start `instance-ai gateway`."
    return McpServersOutput(servers=infos, filesystem_gateway=gateway, note=note)


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="mcp-servers",
        description="List the MCP servers connected to this service (their state and tools) "
        "and the user's filesystem gateway; optionally retry a disconnected server.",
        group=GROUP,
        services=McpTools,
        input_model=McpServersInput,
        output_model=McpServersOutput,
        handler=mcp_servers,
        condition=lambda services: services.servers.configured or services.gateways_enabled,
        requires="INSTANCE_AI_MCP_SERVERS or INSTANCE_AI_HTTP_PORT",
    ),
]
