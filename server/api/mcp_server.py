"""The service as an MCP server: the build-and-verify pipeline and the catalog, for any MCP
client. Like the gRPC layer it only translates: each call is a direct call through the one
tool-call pipeline (the same validation, permissions and events as `Tools.CallTool`), in the
caller's own thread.

The thread is the MCP session's (one per session and user, so two clients never share a
workspace), or the one the `x-instance-ai-thread` header names.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import weakref
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server

from server.api.caller import caller_from
from server.core.caller import Caller, acting
from server.core.failures import describe
from server.core.validation import check_thread_id
from server.errors import NotFoundError
from server.n8n.client import acting_key
from server.tools.calls import ToolCalls
from server.tools.registry import dump

__all__ = ["EXPOSED_TOOLS", "N8N_KEY_HEADER", "THREAD_HEADER", "service_mcp_server"]

THREAD_HEADER = "x-instance-ai-thread"
N8N_KEY_HEADER = "x-n8n-api-key"

# Write a workflow file, build it, verify it, read and settle the claim, find nodes.
EXPOSED_TOOLS = (
    "workspace_write_file",
    "workspace_read_file",
    "workspace_str_replace_file",
    "build-workflow",
    "verify-built-workflow",
    "get-work-item",
    "report-verification-verdict",
    "search-nodes",
    "get-node-description",
)

INSTRUCTIONS = (
    "Builds and verifies n8n workflows in a sandbox. Write the workflow's TypeScript (n8n's "
    "workflow SDK) with workspace_write_file, compile and save it with build-workflow, run "
    "it on fixtures with verify-built-workflow, then read the claim with get-work-item and "
    "settle it with report-verification-verdict. search-nodes and get-node-description "
    "find node types. Every call of this session works in one thread and its workspace."
)


def service_mcp_server(calls: ToolCalls) -> Server[Any, Any]:
    registry = calls.registry
    server: Server[Any, Any] = Server("instance-ai", version=_version(), instructions=INSTRUCTIONS)
    threads: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()

    @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        listed = []
        for name in EXPOSED_TOOLS:
            spec = registry.get(name)
            schema = registry.schema_of(spec)
            if schema is not None and registry.offerable(spec):
                listed.append(
                    types.Tool(name=name, description=spec.description, inputSchema=schema)
                )
        return listed

    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        context = server.request_context
        headers = _headers(context.request)
        try:
            if name not in EXPOSED_TOOLS:
                raise NotFoundError(f"there is no tool {name!r} here; tools/list names them")
            caller = caller_from(headers)
            thread_id = _thread(threads, context.session, caller, headers.get(THREAD_HEADER))
            key = headers.get(N8N_KEY_HEADER, "").strip()
            token = acting_key.set(key) if key else None
            as_caller = acting.set(caller)
            try:
                result = dump(await calls.direct(thread_id, name, arguments, caller=caller))
            finally:
                acting.reset(as_caller)
                if token is not None:
                    acting_key.reset(token)
        except Exception as exc:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=describe(exc))], isError=True
            )
        result["threadId"] = thread_id
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structuredContent=result,
        )

    return server


def _version() -> str:
    try:
        return metadata.version("instance-ai")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "0"


def _headers(request: Any) -> Mapping[str, str]:
    """The HTTP request's headers (an stdio session has none: the local caller)."""
    headers = getattr(request, "headers", None)
    return {k.lower(): v for k, v in headers.items()} if headers is not None else {}


def _thread(
    threads: weakref.WeakKeyDictionary[object, str],
    session: object,
    caller: Caller,
    named: str | None,
) -> str:
    if named:
        return check_thread_id(named)
    nonce = threads.get(session)
    if nonce is None:
        nonce = threads[session] = secrets.token_hex(16)
    digest = hashlib.sha256(f"{caller.user_id}\0{nonce}".encode()).hexdigest()[:32]
    return f"mcp-{digest}"
