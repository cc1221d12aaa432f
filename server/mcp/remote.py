"""What the deployment's MCP servers and the filesystem gateways share: listing a session's
tools, calling one with a deadline (a server that dies or hangs yields a tool error, never
a stuck run), and making a registry tool of each listed tool."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from mcp import ClientSession, McpError, types
from mcp.types import CONNECTION_CLOSED

from server.errors import UnavailableError
from server.tools.registry import provider_schema
from server.tools.spec import ToolContext, ToolSpec

__all__ = [
    "MAX_DESCRIPTION",
    "call_with_deadline",
    "http_client",
    "list_all_tools",
    "remote_tool_spec",
]

MAX_DESCRIPTION = 1024


def http_client(headers: dict[str, str], connect_timeout_s: float) -> httpx.AsyncClient:
    """The HTTP client of a Streamable HTTP session: its headers on every request, a
    connect deadline, and reads long enough for a server's event stream."""
    return httpx.AsyncClient(
        headers=headers,
        timeout=httpx.Timeout(connect_timeout_s, read=300),
        follow_redirects=True,
    )


async def list_all_tools(session: ClientSession) -> list[types.Tool]:
    """Every tool the session offers, across pages."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools


async def call_with_deadline(
    session: ClientSession,
    tool: str,
    arguments: dict[str, Any],
    *,
    label: str,
    timeout_s: float,
    gone: asyncio.Event,
) -> types.CallToolResult:
    """One call; `gone` is set by whoever sees the connection end (the call then fails at
    once instead of waiting out its deadline)."""
    call = asyncio.ensure_future(session.call_tool(tool, arguments))
    ended = asyncio.ensure_future(gone.wait())
    try:
        done, _ = await asyncio.wait(
            {call, ended}, timeout=timeout_s, return_when="FIRST_COMPLETED"
        )
    finally:
        ended.cancel()
        if not call.done():
            call.cancel()
    if call in done:
        try:
            return call.result()
        except McpError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                gone.set()
                raise UnavailableError(f"{label} went away during the call") from None
            raise UnavailableError(f"{label} refused the call: {exc.error.message}") from None
    if ended in done:
        raise UnavailableError(f"{label} went away during the call")
    raise UnavailableError(f"{label} did not answer within {timeout_s:g} s")


def remote_tool_spec(
    tool: types.Tool,
    *,
    name: str,
    label: str,
    group: str,
    services: type,
    handler: Callable[[ToolContext[Any], Any], Awaitable[Any]],
    output_model: type,
    hitl_action: str,
    grant: Callable[[Any], str] | None,
    severity: str = "warning",
) -> ToolSpec[Any] | None:
    """A registry tool for a listed MCP tool; None when its schema cannot be expressed."""
    raw = dict(tool.inputSchema or {})
    if "type" not in raw and "properties" in raw:
        raw["type"] = "object"
    sent = provider_schema(name, raw)
    if sent is None:
        return None
    description = (tool.description or tool.title or tool.name).strip()
    return ToolSpec(
        name=name,
        description=f"[{label}] {description}"[:MAX_DESCRIPTION],
        group=group,
        services=services,
        input_model=dict,
        output_model=output_model,
        handler=handler,
        hitl_action=hitl_action,
        grant=grant,
        severity=severity,
        json_schema=raw,
        provider_schema=sent,
    )
