"""An MCP tool result as a tool result of this service: text and structured content as
they are, images and other binary content stored in the thread's workspace and returned
by reference (a model reads a path, not megabytes of base64), errors as tool errors."""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import types
from pydantic import Field

from server.errors import FailedPreconditionError
from server.tools.spec import ToolModel

__all__ = ["BlobWriter", "McpToolOutput", "ThreadBlobWriter", "converted"]

# Stores one binary content block (path, bytes), returns where it went.
BlobWriter = Callable[[str, bytes], Awaitable[str]]
# The same, in a given thread's workspace (thread id, path, bytes).
ThreadBlobWriter = Callable[[str, str, bytes], Awaitable[str]]
MAX_ERROR_CHARS = 4000


class McpToolOutput(ToolModel):
    content: list[dict[str, Any]]
    structured_content: dict[str, Any] | None = Field(None, alias="structuredContent")


async def converted(
    result: types.CallToolResult, store: BlobWriter | None, stem: str
) -> McpToolOutput:
    """The result for the model; `isError` → a tool error carrying the server's text."""
    if result.isError:
        text = " ".join(b.text for b in result.content if isinstance(b, types.TextContent))
        raise FailedPreconditionError(
            (text or "the MCP tool reported an error without a message")[:MAX_ERROR_CHARS]
        )
    blocks = [
        await _block(block, store, f"{stem}-{index}") for index, block in enumerate(result.content)
    ]
    return McpToolOutput(content=blocks, structured_content=result.structuredContent)


async def _block(block: Any, store: BlobWriter | None, stem: str) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, types.ImageContent | types.AudioContent):
        return await _binary(block.type, block.data, block.mimeType, store, stem)
    if isinstance(block, types.ResourceLink):
        return {"type": "resource_link", "uri": str(block.uri), "name": block.name}
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return {"type": "resource", "uri": str(resource.uri), "text": resource.text}
        reference = await _binary(
            "resource", resource.blob, resource.mimeType or "application/octet-stream", store, stem
        )
        return reference | {"uri": str(resource.uri)}
    return {"type": "unsupported", "note": f"content of type {getattr(block, 'type', '?')}"}


async def _binary(
    kind: str, data: str, mime_type: str, store: BlobWriter | None, stem: str
) -> dict[str, Any]:
    raw = base64.b64decode(data, validate=False)
    reference: dict[str, Any] = {"type": kind, "mimeType": mime_type, "bytes": len(raw)}
    if store is None:
        return reference | {"note": "not kept: this thread has no workspace"}
    extension = mimetypes.guess_extension(mime_type) or ".bin"
    try:
        return reference | {"path": await store(f"{stem}{extension}", raw)}
    except Exception as exc:  # the result still arrives, without the bytes
        return reference | {"note": f"not kept: {type(exc).__name__}"}
