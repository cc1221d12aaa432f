"""Domain values ↔ protobuf messages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.protobuf import timestamp_pb2

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import agent_pb2, events_pb2
from server.errors import InvalidArgumentError
from server.runtime.events import Event
from server.runtime.thread_directory import ThreadInfo
from server.runtime.thread_history import ThreadMessage
from server.runtime.threads import ThreadStatus

__all__ = [
    "event_to_proto",
    "optional_request_object",
    "request_object",
    "thread_message_to_proto",
    "thread_status_to_proto",
    "thread_to_proto",
]


def request_object(text: str, field: str) -> dict[str, Any]:
    """The JSON object of a request's `*_json` field ("" is {}), or INVALID_ARGUMENT."""
    try:
        return from_json(text)
    except ValueError as exc:
        raise InvalidArgumentError(f"{field} {exc}: send the JSON text of an object") from None


def optional_request_object(text: str, field: str) -> dict[str, Any] | None:
    """As request_object, but an empty field means "not given" (None) rather than {}."""
    return request_object(text, field) if text else None


def _timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def event_to_proto(event: Event) -> events_pb2.Event:
    ts = _timestamp(event.ts)
    message = events_pb2.Event(
        type=event.type,
        thread_id=event.thread_id,
        run_id=event.run_id or "",
        agent_id=event.agent_id or "",
        ts=ts,
        payload_json=to_json(event.payload),
    )
    if event.id is not None:
        message.id = event.id
    return message


def thread_status_to_proto(status: ThreadStatus) -> agent_pb2.GetThreadStatusResponse:
    return agent_pb2.GetThreadStatusResponse(
        thread_id=status.thread_id,
        has_active_run=status.has_active_run,
        is_suspended=status.is_suspended,
        active_run_id=status.active_run_id or "",
        last_event_id=status.last_event_id,
        background_tasks=[
            agent_pb2.BackgroundTask(
                task_id=task.task_id,
                role=task.role,
                agent_id=task.agent_id,
                status=task.status,
                started_at=task.started_at.isoformat(),
                run_id=task.run_id or "",
            )
            for task in status.background_tasks
        ],
    )


def thread_to_proto(thread: ThreadInfo) -> agent_pb2.Thread:
    return agent_pb2.Thread(
        thread_id=thread.thread_id,
        title=thread.title,
        owner=thread.owner or "",
        project_id=thread.project_id or "",
        metadata_json=to_json(thread.metadata),
        created_at=_timestamp(thread.created_at),
        updated_at=_timestamp(thread.updated_at),
        last_event_id=thread.last_event_id,
    )


def thread_message_to_proto(message: ThreadMessage) -> agent_pb2.ThreadMessage:
    return agent_pb2.ThreadMessage(
        id=message.id,
        role=message.role,
        run_id=message.run_id,
        message_group_id=message.message_group_id,
        text=message.text,
        created_at=_timestamp(message.created_at),
        attachments=[
            agent_pb2.AttachedFile(name=a.name, mime_type=a.mime_type, size=a.size)
            for a in message.attachments
        ],
    )
