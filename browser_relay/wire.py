"""The relay ↔ extension wire format (version 1): JSON text frames.

Relay → extension, a call: `{"id": n, "method": M, "params": {...}}` with M one of
`attachToTab {tabId?}` (no tabId: the tab the person chose), `createTab {url?}`,
`closeTab {tabId}`, `forwardCDPCommand {tabId, sessionId?, method, params?}`.

Extension → relay: the reply `{"id": n, "result": ...}` or `{"id": n, "error": "text"}`;
the events `{"method": "forwardCDPEvent", "params": {tabId, sessionId?, method, params?}}`,
`{"method": "detachedFromTab", "params": {tabId}}`, and `{"method": "attachedTab", "params":
{tabId, targetInfo}}` for a tab the extension attached by itself (a popup an attached tab
opened). `attachToTab` and `createTab` answer
`{tabId, targetInfo}`. `sessionId` is only set for child sessions (frames, workers): the tab's
own session is implied by `tabId`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from browser_relay.errors import WireError

__all__ = [
    "EVENTS",
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "Attached",
    "AttachedTab",
    "CdpEvent",
    "Detached",
    "ForwardedEvent",
    "FromExtension",
    "Message",
    "Reply",
    "TabGone",
    "call",
    "parse_from_extension",
]

PROTOCOL_VERSION = 1
# CDP screenshots and PDFs exceed the WebSocket libraries' usual 1 MiB frame limit.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class _Message(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)


class Reply(_Message):
    id: int
    result: Any = None
    error: str | None = None


class CdpEvent(_Message):
    tab_id: int | str = Field(alias="tabId")
    session_id: str | None = Field(None, alias="sessionId")
    method: str = Field(min_length=1)
    params: dict[str, Any] = {}


class ForwardedEvent(_Message):
    method: Literal["forwardCDPEvent"]
    params: CdpEvent


class TabGone(_Message):
    tab_id: int | str = Field(alias="tabId")


class Detached(_Message):
    method: Literal["detachedFromTab"]
    params: TabGone


class AttachedTab(_Message):
    """What `attachToTab` and `createTab` answer."""

    tab_id: int | str = Field(alias="tabId")
    target_info: dict[str, Any] = Field(alias="targetInfo")


class Attached(_Message):
    method: Literal["attachedTab"]
    params: AttachedTab


Message = Reply | ForwardedEvent | Detached | Attached
FromExtension = Annotated[Message, Field(union_mode="left_to_right")]
_from_extension: TypeAdapter[Message] = TypeAdapter(FromExtension)
EVENTS = ("forwardCDPEvent", "detachedFromTab", "attachedTab")


def parse_from_extension(raw: str | bytes) -> Message:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise WireError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise WireError("a message is a JSON object")
    if "id" not in value and value.get("method") not in EVENTS:
        raise WireError(
            f"unknown message {str(value.get('method'))[:60]!r}: expected a reply with an id, "
            f"or one of {', '.join(EVENTS)}"
        )
    try:
        return _from_extension.validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "message"
        raise WireError(f"{where}: {first['msg']}") from None


def call(call_id: int, method: str, params: dict[str, Any]) -> str:
    return json.dumps({"id": call_id, "method": method, "params": params})
