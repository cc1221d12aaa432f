"""The deployment's MCP servers: one supervised connection each (connect at start, list the
tools, follow list-changed, ping to notice a dead server, reconnect with backoff), their
tools offered to the orchestrator as `<server>__<tool>`, and the calls to them.

Each connection lives in one task, which enters and leaves the SDK's transport and session
(their cancel scopes must stay in one task); calls from runs go through the open session.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.session import RequestResponder

from server.errors import UnavailableError
from server.mcp.naming import NameClaims
from server.mcp.remote import call_with_deadline, http_client, list_all_tools, remote_tool_spec
from server.mcp.results import McpToolOutput, ThreadBlobWriter, converted
from server.settings import HttpServerConfig, McpServerConfig, StdioServerConfig
from server.tools.spec import ToolContext, ToolSpec

__all__ = ["GROUP", "McpServers", "ServerState"]

log = structlog.get_logger(__name__)

GROUP = "mcp"
HITL_ACTION = "executeMcpTool"
PING_INTERVAL_S = 5.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0

State = Literal["connecting", "connected", "failed", "stopped"]


@dataclass
class ServerState:
    """What the agent and health are told about one server."""

    name: str
    transport: Literal["stdio", "http"]
    state: State = "connecting"
    error: str | None = None
    tools: list[str] = field(default_factory=list)
    connected_at: float | None = None
    retry_at: float | None = None


class _Connection:
    def __init__(self, name: str, config: McpServerConfig, *, connect_timeout_s: float) -> None:
        self.name = name
        self.config = config
        self.connect_timeout_s = connect_timeout_s
        transport: Literal["stdio", "http"] = (
            "stdio" if isinstance(config, StdioServerConfig) else "http"
        )
        self.status = ServerState(name=name, transport=transport)
        self.tools: list[types.Tool] = []
        self.session: ClientSession | None = None
        self.gone = asyncio.Event()
        self._wake = asyncio.Event()
        self._relisting: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        # Called whenever its tools change.
        self.changed: list[Callable[[], None]] = []

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self.status.state = "stopped"

    def reconnect_now(self) -> None:
        self._wake.set()

    async def _supervise(self) -> None:
        delay = BACKOFF_FIRST_S
        while True:
            self.status.state, self.status.retry_at = "connecting", None
            try:
                await self._connected_once()
                delay = BACKOFF_FIRST_S
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the SDK raises exception groups too
                self.status.error = _reason(exc)
                log.warning("MCP server unavailable", server=self.name, error=self.status.error)
            finally:
                self.session = None
                self.gone.set()
            self.status.state = "failed"
            self.status.retry_at = time.time() + delay
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            delay = min(delay * 2, BACKOFF_MAX_S)

    async def _connected_once(self) -> None:
        async with (
            self._transport() as (read, write),
            ClientSession(read, write, message_handler=self._on_message) as session,
        ):
            await asyncio.wait_for(session.initialize(), self.connect_timeout_s)
            tools = await asyncio.wait_for(list_all_tools(session), self.connect_timeout_s)
            self.gone = asyncio.Event()
            self._set_tools(tools)
            self.session = session
            self.status.state, self.status.error = "connected", None
            self.status.connected_at = time.time()
            log.info("MCP server connected", server=self.name, tools=len(tools))
            await self._until_gone(session)
        raise UnavailableError("the connection ended")

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        config = self.config
        if isinstance(config, HttpServerConfig):
            headers = {k: v.get_secret_value() for k, v in config.headers.items()}
            async with (
                http_client(headers, self.connect_timeout_s) as client,
                streamable_http_client(config.url, http_client=client) as (read, write, _),
            ):
                yield read, write
        else:
            params = StdioServerParameters(
                command=config.command[0],
                args=config.command[1:],
                env={k: v.get_secret_value() for k, v in config.env.items()} or None,
                cwd=config.cwd,
            )
            async with stdio_client(params) as (read, write):
                yield read, write

    async def _until_gone(self, session: ClientSession) -> None:
        """Returns when the server stops answering pings or a call saw it go."""
        while not self.gone.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gone.wait(), PING_INTERVAL_S)
                return
            try:
                await asyncio.wait_for(session.send_ping(), self.connect_timeout_s)
            except Exception:
                return

    async def _on_message(
        self,
        message: RequestResponder[types.ServerRequest, types.ClientResult]
        | types.ServerNotification
        | Exception,
    ) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            # Not awaited here: the listing's answer arrives through this very handler.
            self._relisting = asyncio.ensure_future(self._relist())

    async def _relist(self) -> None:
        session = self.session
        if session is None:
            return
        try:
            tools = await asyncio.wait_for(list_all_tools(session), self.connect_timeout_s)
        except Exception as exc:
            log.warning("MCP tool list refresh failed", server=self.name, error=_reason(exc))
            return
        self._set_tools(tools)
        log.info("MCP server tools changed", server=self.name, tools=len(tools))

    def _set_tools(self, tools: list[types.Tool]) -> None:
        self.tools = tools
        self.status.tools = [tool.name for tool in tools]
        for listener in self.changed:
            listener()


class McpServers:
    """The tool source of the deployment's MCP servers (for every user), and the services of
    the `mcp-servers` tool."""

    def __init__(
        self,
        configs: Mapping[str, McpServerConfig],
        *,
        reserved: Iterable[str],
        store_blob: ThreadBlobWriter | None = None,
        call_timeout_s: float,
        connect_timeout_s: float,
    ) -> None:
        self._reserved = frozenset(reserved)
        self._store_blob = store_blob
        self._call_timeout_s = call_timeout_s
        self._connections = {
            name: _Connection(name, config, connect_timeout_s=connect_timeout_s)
            for name, config in configs.items()
        }
        # (server, tool) of every connected server's tools.
        self._specs: list[tuple[str, ToolSpec[Any]]] = []
        for connection in self._connections.values():
            connection.changed.append(self._rebuild)

    @property
    def configured(self) -> bool:
        return bool(self._connections)

    def start(self) -> None:
        for connection in self._connections.values():
            connection.start()

    async def close(self) -> None:
        await asyncio.gather(*(c.stop() for c in self._connections.values()))

    def states(self) -> list[ServerState]:
        return [c.status for c in self._connections.values()]

    def reconnect(self, name: str) -> None:
        connection = self._connections.get(name)
        if connection is not None and connection.session is None:
            connection.reconnect_now()

    def specs(self, user_id: str | None) -> list[ToolSpec[Any]]:
        return [spec for _, spec in self._specs]

    def tools_by_server(self) -> list[tuple[str, ToolSpec[Any]]]:
        return list(self._specs)

    def _rebuild(self) -> None:
        """Every connected server's tools under their names (first come, first named)."""
        claims = NameClaims(self._reserved)
        specs: list[tuple[str, ToolSpec[Any]]] = []
        for connection in self._connections.values():
            for tool in connection.tools:
                spec = self._spec(
                    connection.name, tool, claims.claim_prefixed(connection.name, tool.name)
                )
                if spec is None:
                    log.warning("MCP tool skipped: schema", server=connection.name, tool=tool.name)
                else:
                    specs.append((connection.name, spec))
        self._specs = specs

    def _spec(self, server: str, tool: types.Tool, name: str) -> ToolSpec[Any] | None:
        async def handler(ctx: ToolContext[McpServers], args: dict[str, Any]) -> McpToolOutput:
            return await ctx.services.call(server, tool.name, args, ctx)

        return remote_tool_spec(
            tool,
            name=name,
            label=f"MCP server {server}",
            group=GROUP,
            services=McpServers,
            handler=handler,
            output_model=McpToolOutput,
            hitl_action=HITL_ACTION,
            # "Always in this thread" covers the server's tools, not every server's.
            grant=lambda _args: f"server:{server}",
        )

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], ctx: ToolContext[Any]
    ) -> McpToolOutput:
        connection = self._connections.get(server)
        session = connection.session if connection is not None else None
        if connection is None or session is None:
            if connection is not None:
                connection.reconnect_now()
            why = f" ({connection.status.error})" if connection and connection.status.error else ""
            raise UnavailableError(
                f"MCP server {server} is not connected{why}; it is being reconnected: call "
                "mcp-servers to see when it is back"
            )
        result = await call_with_deadline(
            session,
            tool,
            arguments,
            label=f"MCP server {server}",
            timeout_s=self._call_timeout_s,
            gone=connection.gone,
        )
        store = self._store_blob
        stem = f"mcp/{ctx.tool_call_id or 'call'}"
        return await converted(
            result,
            (lambda path, data: store(ctx.thread_id, path, data)) if store else None,
            stem,
        )


def _reason(exc: BaseException) -> str:
    """The innermost meaningful message of what the SDK raised (often an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text[:300]
