"""The item a verification or test run feeds its trigger, shaped per trigger type the way the
reference does, and the execution mode that goes with it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from server.errors import InvalidArgumentError

__all__ = [
    "CHAT",
    "FORM",
    "SCHEDULE",
    "WEBHOOK",
    "WEBHOOK_ENVELOPE",
    "Mode",
    "TriggerInput",
    "shape_trigger_input",
]

Mode = Literal["chat", "trigger", "webhook", "manual"]

CHAT = "@n8n/n8n-nodes-langchain.chatTrigger"
FORM = "n8n-nodes-base.formTrigger"
WEBHOOK = "n8n-nodes-base.webhook"
SCHEDULE = "n8n-nodes-base.scheduleTrigger"
WEBHOOK_ENVELOPE = frozenset({"body", "headers", "query", "params"})


@dataclass(frozen=True, kw_only=True)
class TriggerInput:
    item: dict[str, Any]
    mode: Mode


def shape_trigger_input(trigger_type: str, data: Any, *, now: datetime) -> TriggerInput:
    """`data` (what the caller gave, possibly None) as the trigger's output item."""
    if trigger_type == CHAT:
        return TriggerInput(item=_chat(data, now), mode="chat")
    if trigger_type == FORM:
        return TriggerInput(item=_form(data, now), mode="trigger")
    if trigger_type == WEBHOOK:
        return TriggerInput(item=_webhook(data), mode="webhook")
    if trigger_type == SCHEDULE:
        return TriggerInput(item=_schedule(now), mode="trigger")
    return TriggerInput(item=_object(data), mode="manual")


def _object(data: Any) -> dict[str, Any]:
    if data is None:
        return {}
    return dict(data) if isinstance(data, dict) else {"value": data}


def _chat(data: Any, now: datetime) -> dict[str, Any]:
    if isinstance(data, str):
        message = data
    elif isinstance(data, dict) and isinstance(data.get("chatInput"), str):
        message = data["chatInput"]
    else:
        message = json.dumps(data if data is not None else {})
    return {
        "sessionId": f"instance-ai-{int(now.timestamp() * 1000)}",
        "action": "sendMessage",
        "chatInput": message,
    }


def _form(data: Any, now: datetime) -> dict[str, Any]:
    fields = _object(data)
    if "formFields" in fields:
        raise InvalidArgumentError(
            "form trigger input must be the submitted fields themselves "
            '(e.g. {"email": "a@b.c"}), not wrapped in formFields'
        )
    return {"submittedAt": now.isoformat(), "formMode": "instanceAi", **fields}


def _webhook(data: Any) -> dict[str, Any]:
    given = _object(data)
    if given and set(given) <= WEBHOOK_ENVELOPE:
        return {key: given.get(key, {}) for key in ("headers", "query", "params", "body")}
    return {"headers": {}, "query": {}, "params": {}, "body": given}


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _schedule(now: datetime) -> dict[str, Any]:
    hour12 = now.hour % 12 or 12
    readable = (
        f"{now:%B} {_ordinal(now.day)} {now.year}, "
        f"{hour12}:{now:%M}:{now:%S} {'pm' if now.hour >= 12 else 'am'}"
    )
    return {
        "timestamp": now.isoformat(),
        "Readable date": readable,
        "Day of week": f"{now:%A}",
        "Year": f"{now.year}",
        "Month": f"{now:%B}",
        "Day of month": f"{now.day:02d}",
        "Hour": f"{now.hour:02d}",
        "Minute": f"{now.minute:02d}",
        "Second": f"{now.second:02d}",
    }
