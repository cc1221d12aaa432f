"""Files a user attaches to a chat message: checked against the size limits, kept with the
thread (tied to the run the message started), and listed for the agent."""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import insert, select

from server.core.ids import new_id
from server.domain.file_parsing import Format, detect_format
from server.errors import InvalidArgumentError, ResourceExhaustedError
from server.store import Database
from server.store.models import AttachmentRow
from server.store.threads import ensure_threads

__all__ = ["MAX_ATTACHMENTS", "Attachment", "Attachments", "StoredAttachment", "check_attachments"]

MAX_ATTACHMENTS = 10
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]")


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """As the client sent it."""

    name: str
    mime_type: str
    data: bytes


@dataclass(frozen=True, kw_only=True)
class StoredAttachment:
    id: str
    position: int
    name: str
    mime_type: str
    size: int
    sha256: str
    data: bytes

    @property
    def format(self) -> Format | None:
        return detect_format(self.name, self.mime_type)

    @property
    def workspace_path(self) -> str:
        """Where it is copied in the workspace: attachments/<position>-<a safe name>."""
        safe = _UNSAFE.sub("_", posixpath.basename(self.name)).strip(". ") or "file"
        return f"attachments/{self.position}-{safe}"


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def check_attachments(
    attachments: list[Attachment], *, max_file_bytes: int, max_total_bytes: int
) -> None:
    """Refused before anything is stored: too many or unnamed (INVALID_ARGUMENT), or over a
    size limit (RESOURCE_EXHAUSTED, like a message over its length)."""
    if len(attachments) > MAX_ATTACHMENTS:
        raise InvalidArgumentError(
            f"attachments: {len(attachments)} files; at most {MAX_ATTACHMENTS} per message"
        )
    for index, attachment in enumerate(attachments):
        name = attachment.name.strip()
        if not name or len(name) > 255 or "\0" in name:
            raise InvalidArgumentError(
                f"attachments[{index}].name: give the file's name (1-255 characters), "
                "e.g. orders.csv"
            )
        if len(attachment.mime_type) > 255:
            raise InvalidArgumentError(f"attachments[{index}].mime_type is over 255 characters")
        if not attachment.data:
            raise InvalidArgumentError(f"attachments[{index}] ({name}) is empty")
        if len(attachment.data) > max_file_bytes:
            raise ResourceExhaustedError(
                f"attachments[{index}] ({name}) is {_megabytes(len(attachment.data))}: over the "
                f"{_megabytes(max_file_bytes)} limit per file (INSTANCE_AI_MAX_ATTACHMENT_BYTES)"
            )
    total = sum(len(a.data) for a in attachments)
    if total > max_total_bytes:
        raise ResourceExhaustedError(
            f"attachments: {_megabytes(total)} in all, over the {_megabytes(max_total_bytes)} "
            "limit per message (INSTANCE_AI_MAX_ATTACHMENTS_BYTES); send fewer or smaller files"
        )


@dataclass(kw_only=True)
class Attachments:
    db: Database

    async def save(
        self, thread_id: str, run_id: str, attachments: list[Attachment]
    ) -> list[StoredAttachment]:
        now = datetime.now(UTC)
        stored = [
            StoredAttachment(
                id=new_id("att"),
                position=position,
                name=a.name.strip(),
                mime_type=a.mime_type.strip() or "application/octet-stream",
                size=len(a.data),
                sha256=hashlib.sha256(a.data).hexdigest(),
                data=a.data,
            )
            for position, a in enumerate(attachments)
        ]
        if stored:
            async with self.db.engine.begin() as conn:
                await ensure_threads(conn, [thread_id])
                await conn.execute(
                    insert(AttachmentRow),
                    [
                        {**vars(s), "thread_id": thread_id, "run_id": run_id, "created_at": now}
                        for s in stored
                    ],
                )
        return stored

    async def of_run(self, run_id: str) -> list[StoredAttachment]:
        """The attachments of the message that started the run, in order."""
        async with self.db.session() as session:
            rows = await session.scalars(
                select(AttachmentRow)
                .where(AttachmentRow.run_id == run_id)
                .order_by(AttachmentRow.position)
            )
            return [_stored(row) for row in rows]

    async def any_parseable(self, run_id: str) -> bool:
        """Whether the run's message carries a file parse-file reads (without its bytes)."""
        async with self.db.session() as session:
            rows = await session.execute(
                select(AttachmentRow.name, AttachmentRow.mime_type).where(
                    AttachmentRow.run_id == run_id
                )
            )
            return any(detect_format(name, mime) is not None for name, mime in rows)

    async def latest(self, thread_id: str) -> list[StoredAttachment]:
        """The attachments of the thread's latest message that had any."""
        async with self.db.session() as session:
            last = await session.scalar(
                select(AttachmentRow.run_id)
                .where(AttachmentRow.thread_id == thread_id)
                .order_by(AttachmentRow.created_at.desc(), AttachmentRow.id.desc())
                .limit(1)
            )
        return await self.of_run(last) if last is not None else []


def _stored(row: AttachmentRow) -> StoredAttachment:
    return StoredAttachment(
        id=row.id,
        position=row.position,
        name=row.name,
        mime_type=row.mime_type,
        size=row.size,
        sha256=row.sha256,
        data=row.data,
    )
