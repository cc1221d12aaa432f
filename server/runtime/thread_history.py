"""A thread's conversation as a person reads it: each message a person sent (its text as
typed, the names of its attachments) and the assistant's answer to each run (its text blocks),
oldest first, in pages counted from the newest.

This is not what the model is shown (`conversation.py` keeps that, with the service's own
notes around the person's words); tool calls, cards and sub-agents are in the event log."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select

from server.errors import InvalidArgumentError
from server.runtime.events import ORCHESTRATOR
from server.store import Database
from server.store.models import AttachmentRow, EventRow, RunRow

__all__ = ["MAX_MESSAGES_PAGE", "AttachedFile", "ThreadHistory", "ThreadMessage"]

MAX_MESSAGES_PAGE = 200


@dataclass(frozen=True, kw_only=True)
class AttachedFile:
    name: str
    mime_type: str
    size: int


@dataclass(frozen=True, kw_only=True)
class ThreadMessage:
    # The client's id for a person's message (the run's id when it sent none); the run's id
    # for the assistant's answer.
    id: str
    role: str  # "user" | "assistant"
    run_id: str
    message_group_id: str
    text: str
    created_at: datetime
    attachments: list[AttachedFile] = field(default_factory=list)


@dataclass(kw_only=True)
class ThreadHistory:
    db: Database

    async def messages(
        self, thread_id: str, *, page_size: int = 50, page: int = 0
    ) -> list[ThreadMessage]:
        """Page `page` counted from the newest (0: the newest `page_size`), oldest first."""
        if not 1 <= page_size <= MAX_MESSAGES_PAGE:
            raise InvalidArgumentError(f"page_size must be 1-{MAX_MESSAGES_PAGE}, not {page_size}")
        if page < 0:
            raise InvalidArgumentError(f"page must be 0 or more, not {page}")
        everything = await self._all(thread_id)
        end = len(everything) - page * page_size
        return everything[max(0, end - page_size) : max(0, end)]

    async def all(self, thread_id: str) -> list[ThreadMessage]:
        """The whole conversation, oldest first."""
        return await self._all(thread_id)

    async def _all(self, thread_id: str) -> list[ThreadMessage]:
        async with self.db.engine.connect() as conn:
            runs = (
                await conn.execute(
                    select(RunRow.__table__)
                    .where(RunRow.thread_id == thread_id)
                    .order_by(RunRow.started_at, RunRow.id)
                )
            ).all()
            texts = (
                await conn.execute(
                    select(EventRow.run_id, EventRow.payload, EventRow.ts)
                    .where(
                        EventRow.thread_id == thread_id,
                        EventRow.type == "text-block",
                        EventRow.agent_id == ORCHESTRATOR,
                    )
                    .order_by(EventRow.id)
                )
            ).all()
            files = (
                await conn.execute(
                    select(
                        AttachmentRow.run_id,
                        AttachmentRow.name,
                        AttachmentRow.mime_type,
                        AttachmentRow.size,
                    )
                    .where(AttachmentRow.thread_id == thread_id)
                    .order_by(AttachmentRow.run_id, AttachmentRow.position)
                )
            ).all()
        answers: dict[str, list[Any]] = defaultdict(list)
        for run_id, payload, ts in texts:
            answers[run_id].append((str(payload.get("text", "")), ts))
        attached: dict[str, list[AttachedFile]] = defaultdict(list)
        for run_id, name, mime_type, size in files:
            attached[run_id].append(AttachedFile(name=name, mime_type=mime_type, size=size))
        messages: list[ThreadMessage] = []
        for run in runs:
            group = run.message_group_id or run.id
            if run.message is not None:
                messages.append(
                    ThreadMessage(
                        id=run.message_id or run.id,
                        role="user",
                        run_id=run.id,
                        message_group_id=group,
                        text=run.message,
                        created_at=run.started_at,
                        attachments=attached.get(run.id, []),
                    )
                )
            if answers.get(run.id):
                blocks = answers[run.id]
                messages.append(
                    ThreadMessage(
                        id=run.id,
                        role="assistant",
                        run_id=run.id,
                        message_group_id=group,
                        text="\n\n".join(text for text, _ in blocks if text),
                        created_at=blocks[-1][1],
                    )
                )
        return messages
