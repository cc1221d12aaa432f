"""A real MCP server for the tests, written with the SDK's low-level server so its tools can
take what models find hard: a root union, enums, nested objects. Run as

    python -m tests.mcp_demo_server stdio
    python -m tests.mcp_demo_server http PORT      # Streamable HTTP on 127.0.0.1:PORT/mcp

Tools: `add` (nested object, enum), `shape` (root anyOf), `picture` (an image), `fail` (an
error result), `die` (the process exits mid-call), `slow` (sleeps), `grow` (adds the tool
`extra` and says the list changed)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server

# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

TOOLS = [
    types.Tool(
        name="add",
        description="Add or multiply two numbers.",
        inputSchema={
            "type": "object",
            "properties": {
                "numbers": {
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"],
                },
                "mode": {"type": "string", "enum": ["sum", "product"]},
            },
            "required": ["numbers", "mode"],
        },
    ),
    types.Tool(
        name="shape",
        description="Area of a circle or a square.",
        inputSchema={
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"kind": {"const": "circle"}, "radius": {"type": "number"}},
                    "required": ["kind", "radius"],
                },
                {
                    "type": "object",
                    "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                    "required": ["kind", "side"],
                },
            ]
        },
    ),
    types.Tool(name="picture", description="A picture.", inputSchema={"type": "object"}),
    types.Tool(name="fail", description="Always fails.", inputSchema={"type": "object"}),
    types.Tool(name="die", description="Exits mid-call.", inputSchema={"type": "object"}),
    types.Tool(
        name="slow",
        description="Sleeps.",
        inputSchema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    ),
    types.Tool(name="grow", description="Adds a tool.", inputSchema={"type": "object"}),
]
EXTRA = types.Tool(name="extra", description="Added by grow.", inputSchema={"type": "object"})


def demo_server() -> Server[Any, Any]:
    server: Server[Any, Any] = Server("demo")
    tools = list(TOOLS)

    @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return tools

    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, args: dict[str, Any]) -> Any:
        if name == "add":
            a, b = args["numbers"]["a"], args["numbers"]["b"]
            value = a + b if args["mode"] == "sum" else a * b
            return [types.TextContent(type="text", text=f"result={value:g}")]
        if name == "shape":
            area = math.pi * args["radius"] ** 2 if args["kind"] == "circle" else args["side"] ** 2
            return {"area": round(area, 3)}
        if name == "picture":
            data = base64.b64encode(PIXEL).decode()
            return [types.ImageContent(type="image", data=data, mimeType="image/png")]
        if name == "fail":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="the demo failed on purpose")],
                isError=True,
            )
        if name == "die":
            await asyncio.sleep(0.2)
            os._exit(3)
        if name == "slow":
            await asyncio.sleep(float(args.get("seconds", 30)))
            return [types.TextContent(type="text", text="slept")]
        if name == "grow":
            if EXTRA not in tools:
                tools.append(EXTRA)
            await server.request_context.session.send_tool_list_changed()
            return [types.TextContent(type="text", text="grown")]
        if name == "extra":
            return [types.TextContent(type="text", text="extra works")]
        raise ValueError(f"unknown tool {name}")

    return server


async def _stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = demo_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _http(port: int) -> None:
    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Mount

    manager = StreamableHTTPSessionManager(app=demo_server())

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        asyncio.run(_stdio())
    else:
        _http(int(sys.argv[2]))
