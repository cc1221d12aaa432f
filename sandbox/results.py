"""Views over a stored result (a command's or tool's full output kept in the workspace).

Pure functions over the result's text, so any provider can serve them:
- `text`: a character window, `max_chars` ≤ 20,000;
- `describe`: the size and the shape (for JSON: type, keys, array lengths two levels deep),
  never the content, so a caller can find the pointer it needs;
- `json`: the value at an RFC 6901 pointer; arrays are paged by `offset` and `limit` ≤ 100.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from sandbox.errors import SandboxError

__all__ = [
    "MAX_CHARS",
    "MAX_ITEMS",
    "ResultViewError",
    "ResultWindow",
    "View",
    "render",
    "resolve_pointer",
]

MAX_CHARS = 20_000
MAX_ITEMS = 100
View = Literal["text", "describe", "json"]


class ResultViewError(SandboxError):
    """The request does not fit the stored result (bad pointer, not JSON, bad window)."""


@dataclass(frozen=True, kw_only=True)
class ResultWindow:
    content: str
    total: int
    next_offset: int | None


def render(
    text: str,
    *,
    view: View = "text",
    pointer: str = "",
    offset: int = 0,
    max_chars: int = MAX_CHARS,
    limit: int = MAX_ITEMS,
) -> ResultWindow:
    if offset < 0:
        raise ResultViewError("offset must be 0 or more")
    if view == "text":
        return _text_window(text, offset, max_chars)
    document = _parse(text) if view in ("describe", "json") else None
    if view == "describe":
        shape: dict[str, Any] = {"chars": len(text), "lines": text.count("\n") + 1}
        if document is not _NOT_JSON:
            shape["json"] = _shape(document, depth=2)
        return ResultWindow(content=json.dumps(shape), total=len(text), next_offset=None)
    if view == "json":
        if document is _NOT_JSON:
            raise ResultViewError("this result is not JSON: read it with view 'text'")
        return _json_window(resolve_pointer(document, pointer), offset, limit)
    raise ResultViewError(f"unknown view {view!r}: use text, describe or json")


def _text_window(text: str, offset: int, max_chars: int) -> ResultWindow:
    if not 1 <= max_chars <= MAX_CHARS:
        raise ResultViewError(f"max_chars must be 1-{MAX_CHARS}")
    end = offset + max_chars
    return ResultWindow(
        content=text[offset:end], total=len(text), next_offset=end if end < len(text) else None
    )


def _json_window(value: Any, offset: int, limit: int) -> ResultWindow:
    if not 1 <= limit <= MAX_ITEMS:
        raise ResultViewError(f"limit must be 1-{MAX_ITEMS}")
    if not isinstance(value, list):
        return ResultWindow(content=json.dumps(value), total=1, next_offset=None)
    end = offset + limit
    return ResultWindow(
        content=json.dumps(value[offset:end]),
        total=len(value),
        next_offset=end if end < len(value) else None,
    )


_NOT_JSON = object()


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


def _shape(value: Any, *, depth: int) -> Any:
    if isinstance(value, dict):
        if depth == 0:
            return {"type": "object", "keys": len(value)}
        return {
            "type": "object",
            "keys": {k: _shape(v, depth=depth - 1) for k, v in list(value.items())[:50]},
        }
    if isinstance(value, list):
        described: dict[str, Any] = {"type": "array", "length": len(value)}
        if value and depth > 0:
            described["first"] = _shape(value[0], depth=depth - 1)
        return described
    return {"type": type(value).__name__.replace("str", "string").replace("NoneType", "null")}


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at an RFC 6901 pointer (`/a/0/b`; `~1` is `/`, `~0` is `~`)."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        raise ResultViewError(f"pointer {pointer!r} must start with '/' (or be empty)")
    value = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            raise ResultViewError(
                f"pointer {pointer!r} does not exist (at {token!r}); use view 'describe' "
                "to see the structure"
            )
    return value
