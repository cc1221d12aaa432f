"""`instance-ai gateway` (share a folder of this machine with the service's agent) and
`instance-ai mcp` (the service as an MCP server on stdio, for MCP clients that start their
servers as commands: it relays to the service's Streamable HTTP endpoint).

Both run on people's machines and start often, so they import nothing of the service itself:
`instance_ai_cli.entry` runs them without loading the full command."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from fs_gateway.connect import GatewayRefused, run_gateway
from fs_gateway.files import FileRoot
from instance_ai_cli.help_text import sentence_help
from instance_ai_client.terminal import EXIT_FAILURE, EXIT_USAGE, err
from server.logs import configure_logging

__all__ = ["LIGHT_COMMANDS", "gateway", "light_app", "mcp"]

DEFAULT_MCP_URL = "http://127.0.0.1:50052/mcp"
CONNECT_TIMEOUT_S = 15.0


def gateway(
    server: Annotated[
        str,
        typer.Option(
            "--server",
            envvar="INSTANCE_AI_GATEWAY_SERVER",
            help="the service's HTTP endpoint, e.g. http://127.0.0.1:50052",
        ),
    ],
    root: Annotated[Path, typer.Option("--root", help="the folder to share")],
    key: Annotated[
        str,
        typer.Option(
            "--key",
            envvar="INSTANCE_AI_GATEWAY_KEY",
            help="your gateway key (Gateway.CreateGatewayKey); prefer the environment variable",
        ),
    ],
    write: Annotated[bool, typer.Option("--write", help="also let the agent write files")] = False,
) -> None:
    """Share a folder of this machine with the agent: connects out to the service (nothing
    listens here) and serves the folder's files until stopped."""
    configure_logging(log_format="console", level="info")
    logging.getLogger("mcp").setLevel(logging.WARNING)  # not a line per request
    try:
        files = FileRoot(root, write=write)
    except OSError as exc:
        err.print(f"instance-ai gateway: --root {root}: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    try:
        asyncio.run(run_gateway(server, key, files))
    except ValueError as exc:
        err.print(f"instance-ai gateway: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    except GatewayRefused as exc:
        err.print(f"instance-ai gateway: {exc}", markup=False)
        raise typer.Exit(EXIT_FAILURE) from None
    except KeyboardInterrupt:
        pass


def mcp(
    url: Annotated[
        str,
        typer.Option("--url", envvar="INSTANCE_AI_MCP_URL", help="the service's MCP endpoint"),
    ] = DEFAULT_MCP_URL,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="INSTANCE_AI_API_KEY", help="API key (Bearer token)"),
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", envvar="INSTANCE_AI_USER", help="act as this user")
    ] = None,
    thread: Annotated[
        str | None,
        typer.Option("--thread", help="work in this thread (default: one per session)"),
    ] = None,
) -> None:
    """Serve the service's build-and-verify tools over stdio (MCP), relaying each call to
    the running service's HTTP endpoint."""
    headers = {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if user:
        headers["x-instance-ai-user"] = user
    if thread:
        headers["x-instance-ai-thread"] = thread
    try:
        asyncio.run(_relay(url, headers))
    except Exception as exc:
        err.print(f"instance-ai mcp: cannot reach {url}: {_reason(exc)}", markup=False)
        raise typer.Exit(EXIT_FAILURE) from None


async def _relay(url: str, headers: dict[str, str]) -> None:
    timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=300)
    async with (
        httpx.AsyncClient(headers=headers, timeout=timeout, follow_redirects=True) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as upstream,
    ):
        started = await upstream.initialize()
        info = started.serverInfo
        server: Server[Any, Any] = Server(
            info.name, version=info.version, instructions=started.instructions
        )

        @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
        async def list_tools() -> list[types.Tool]:
            return (await upstream.list_tools()).tools

        @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
        async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            return await upstream.call_tool(name, arguments)

        async with stdio_server() as (stdin, stdout):
            await server.run(stdin, stdout, server.create_initialization_options())


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


# The commands `instance_ai_cli.entry` runs without the rest of the CLI.
LIGHT_COMMANDS = ("gateway", "mcp")
light_app = typer.Typer(name="instance-ai", add_completion=False)
light_app.command()(gateway)
light_app.command()(mcp)
sentence_help(light_app)
