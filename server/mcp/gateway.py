"""The service's side of filesystem gateways: one per user, connected out from the person's
machine (`fs_gateway`). While a user's gateway is connected, that user's threads get its
tools (under their own names, never shadowing the service's); each call is announced to the
thread as a `filesystem-request` event (n8n's contract) and answered by the gateway as an
MCP tool result. When it disconnects the tools go, and a call in flight fails at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from mcp import ClientSession, types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fs_gateway.link import message_streams
from server.core.ids import new_id
from server.errors import InvalidArgumentError, UnavailableError
from server.mcp.naming import NameClaims
from server.mcp.remote import call_with_deadline, list_all_tools, remote_tool_spec
from server.mcp.results import McpToolOutput, converted
from server.runtime.events import EventLog
from server.tools.spec import ToolContext, ToolSpec

__all__ = ["GROUP", "GatewayHello", "Gateways"]

log = structlog.get_logger(__name__)

GROUP = "filesystem"
HITL_ACTION = "readFilesystem"


class ToolCategory(BaseModel):
    name: str = Field(max_length=64)
    enabled: bool
    write_access: bool | None = Field(None, alias="writeAccess")


class GatewayHello(BaseModel):
    """What a gateway says of itself first (n8n's gateway capabilities, tools aside: those
    come over MCP)."""

    model_config = ConfigDict(populate_by_name=True)

    root_path: str = Field(alias="rootPath", max_length=4096)
    host_identifier: str | None = Field(None, alias="hostIdentifier", max_length=256)
    tool_categories: list[ToolCategory] = Field(
        default_factory=list, alias="toolCategories", max_length=32
    )


@dataclass
class _Gateway:
    user_id: str
    hello: GatewayHello
    session: ClientSession
    gone: asyncio.Event
    connected_at: float
    # Why the service ended it (a newer gateway of the user, a new key), if it did.
    ended_by_service: str | None = None
    specs: list[ToolSpec[Any]] = field(default_factory=list)
    tools: list[types.Tool] = field(default_factory=list)


class Gateways:
    """The connected gateways by user: a tool source (each user gets only their own), and
    what the `mcp-servers` tool and the Gateway RPCs report."""

    def __init__(
        self,
        *,
        events: EventLog,
        reserved: Iterable[str],
        call_timeout_s: float,
        connect_timeout_s: float,
    ) -> None:
        self._events = events
        self._reserved = frozenset(reserved)
        self._call_timeout_s = call_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._by_user: dict[str, _Gateway] = {}

    def specs(self, user_id: str | None) -> list[ToolSpec[Any]]:
        gateway = self._by_user.get(user_id) if user_id is not None else None
        return gateway.specs if gateway is not None else []

    def of(self, user_id: str) -> dict[str, Any] | None:
        """The user's connected gateway, as n8n describes one (None when none is)."""
        gateway = self._by_user.get(user_id)
        if gateway is None:
            return None
        return gateway.hello.model_dump(mode="json", by_alias=True, exclude_none=True) | {
            "tools": [spec.name for spec in gateway.specs],
            "connectedAt": gateway.connected_at,
        }

    async def serve(
        self,
        user_id: str,
        receive: Callable[[], Awaitable[str]],
        send: Callable[[str], Awaitable[None]],
    ) -> str | None:
        """Run one gateway's connection until it ends; returns why when the service ended it
        (a newer gateway of the same user replaced it, or the user's key was replaced).
        Raises InvalidArgumentError for a gateway that does not introduce itself."""
        try:
            first = await asyncio.wait_for(receive(), self._connect_timeout_s)
            hello = GatewayHello.model_validate_json(first)
        except (ValidationError, TimeoutError):
            raise InvalidArgumentError(
                "the gateway did not introduce itself (first a JSON hello with rootPath)"
            ) from None
        ended = anyio.Event()
        async with (
            message_streams(receive, send, ended) as (read, write),
            ClientSession(read, write) as session,
        ):
            await asyncio.wait_for(session.initialize(), self._connect_timeout_s)
            tools = await asyncio.wait_for(list_all_tools(session), self._connect_timeout_s)
            gateway = _Gateway(
                user_id=user_id,
                hello=hello,
                session=session,
                gone=asyncio.Event(),
                connected_at=time.time(),
                tools=tools,
            )
            gateway.specs = self._specs(gateway)
            self.disconnect(user_id, "a newer gateway of this user connected")
            self._by_user[user_id] = gateway
            log.info("gateway connected", user=user_id, tools=len(gateway.specs))
            try:
                await _first(ended.wait(), gateway.gone.wait())
            finally:
                gateway.gone.set()
                if self._by_user.get(user_id) is gateway:
                    del self._by_user[user_id]
                log.info("gateway disconnected", user=user_id, why=gateway.ended_by_service)
            return gateway.ended_by_service

    def disconnect(self, user_id: str, why: str) -> None:
        """End the user's gateway, telling it why (it stops instead of reconnecting)."""
        gateway = self._by_user.get(user_id)
        if gateway is not None:
            gateway.ended_by_service = why
            gateway.gone.set()

    def close(self) -> None:
        for gateway in list(self._by_user.values()):
            gateway.gone.set()

    def _specs(self, gateway: _Gateway) -> list[ToolSpec[Any]]:
        claims = NameClaims(self._reserved)
        specs = []
        for tool in gateway.tools:
            name = claims.claim_exact(tool.name)
            spec = self._spec(gateway, tool, name) if name is not None else None
            if spec is None:
                log.warning("gateway tool skipped (name or schema)", tool=tool.name[:64])
            else:
                specs.append(spec)
        return specs

    def _spec(self, gateway: _Gateway, tool: types.Tool, name: str) -> ToolSpec[Any] | None:
        writes = not (tool.annotations is not None and tool.annotations.readOnlyHint)

        async def handler(ctx: ToolContext[Gateways], args: dict[str, Any]) -> McpToolOutput:
            return await ctx.services.call(gateway, tool.name, args, ctx)

        return remote_tool_spec(
            tool,
            name=name,
            label="files on " + (gateway.hello.host_identifier or "the user's machine"),
            group=GROUP,
            services=Gateways,
            handler=handler,
            output_model=McpToolOutput,
            hitl_action=HITL_ACTION,
            # "Always in this thread": reads of the gateway, or writes of one path.
            grant=(lambda args: f"write:{args.get('path', '')}") if writes else None,
            severity="destructive" if writes else "info",
        )

    async def call(
        self, gateway: _Gateway, tool: str, arguments: dict[str, Any], ctx: ToolContext[Any]
    ) -> McpToolOutput:
        if gateway.gone.is_set():
            raise UnavailableError(
                "the filesystem gateway disconnected; ask the user to restart it"
            )
        await self._events.append(
            ctx.thread_id,
            "filesystem-request",
            {"requestId": new_id("fsreq"), "toolCall": {"name": tool, "arguments": arguments}},
            run_id=ctx.run_id,
            agent_id=ctx.agent_id,
        )
        result = await call_with_deadline(
            gateway.session,
            tool,
            arguments,
            label="the filesystem gateway",
            timeout_s=self._call_timeout_s,
            gone=gateway.gone,
        )
        return await converted(result, None, "")


async def _first(*waits: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
