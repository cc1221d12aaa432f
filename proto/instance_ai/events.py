"""A streamed `Event` in the shape of n8n's event contract (`instanceAiEventSchema` of
`@n8n/api-types`): `{type, runId, agentId, ts, payload}` with `ts` in milliseconds since the
epoch, plus the service's own `id` (durable events) and `threadId`, which the contract's
objects let through. A text's `responseId` (which model response it belongs to) is where n8n
keeps it, on the event: its editor folds a durable `text-block` into the live deltas of the
same response by it. (Written by hand; the generated modules are in `v1/`.)"""

from __future__ import annotations

from typing import Any

from instance_ai.json_text import from_json
from instance_ai.v1 import events_pb2

__all__ = ["n8n_event"]


def n8n_event(event: events_pb2.Event) -> dict[str, Any]:
    shaped: dict[str, Any] = {
        "type": event.type,
        "runId": event.run_id,
        "agentId": event.agent_id,
        "ts": event.ts.ToMilliseconds(),
        "payload": from_json(event.payload_json),
        "threadId": event.thread_id,
    }
    response_id = shaped["payload"].get("responseId")
    if isinstance(response_id, str) and response_id:
        shaped["responseId"] = response_id
    if event.HasField("id"):
        shaped["id"] = event.id
    return shaped
