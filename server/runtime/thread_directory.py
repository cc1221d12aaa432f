"""Which threads exist and whose they are: each belongs to the user who opened it (the caller
of `open`, or of the first message), in the project it was opened in, with the client's
metadata (n8n's `source`, `origin`) and a title. Another user's thread answers
PERMISSION_DENIED (as n8n's assistant answers 403 for it); lists show a user only their own.

A thread made before owners existed, or made by a direct tool call outside any conversation,
has no owner: any caller reaches it, and the first person to open it or send it a message
owns it."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core.caller import Caller
from server.core.ids import new_id
from server.core.validation import check_thread_id
from server.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from server.store import Database
from server.store.threads import THREADS, claim_thread

__all__ = [
    "MAX_METADATA_CHARS",
    "MAX_PAGE",
    "MAX_TITLE_CHARS",
    "ThreadDirectory",
    "ThreadInfo",
    "ThreadPage",
]

MAX_PAGE = 100
MAX_TITLE_CHARS = 255
MAX_METADATA_CHARS = 8192
_COLUMN = THREADS.c


@dataclass(frozen=True, kw_only=True)
class ThreadInfo:
    thread_id: str
    title: str
    owner: str | None
    project_id: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    last_event_id: int


@dataclass(frozen=True, kw_only=True)
class ThreadPage:
    threads: list[ThreadInfo]
    # Where the next page starts; None on the last page.
    next_page_token: str | None


@dataclass(kw_only=True)
class ThreadDirectory:
    db: Database

    async def open(
        self, thread_id: str, caller: Caller, metadata: dict[str, Any] | None = None
    ) -> tuple[ThreadInfo, bool]:
        """The caller's thread `thread_id` (a new id when empty), made if new: (info, made).
        An existing thread is returned unchanged (its metadata and project stay)."""
        thread_id = check_thread_id(thread_id) if thread_id else new_id("thread")
        _check_metadata(metadata)
        now = datetime.now(UTC)
        async with self.db.engine.begin() as conn:
            insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
            made = await conn.execute(
                insert(THREADS)
                .values(
                    id=thread_id,
                    created_at=now,
                    updated_at=now,
                    last_event_id=0,
                    owner=caller.user_id,
                    project_id=caller.project_id,
                    metadata=metadata or None,
                )
                .on_conflict_do_nothing()
            )
            row = await _read(conn, thread_id)
            if row is not None and row.owner is None:  # made outside a conversation: claimed
                await claim_thread(conn, thread_id, caller.user_id, caller.project_id)
                row = await _read(conn, thread_id)
            info = _allowed(row, thread_id, caller)
        return info, bool(made.rowcount)

    async def get(self, thread_id: str, caller: Caller) -> ThreadInfo:
        check_thread_id(thread_id)
        async with self.db.engine.connect() as conn:
            return _allowed(await _read(conn, thread_id), thread_id, caller)

    async def check_access(self, thread_id: str, caller: Caller, *, allow_new: bool) -> None:
        """PERMISSION_DENIED for another user's thread; NOT_FOUND for an unknown one unless
        `allow_new` (the call will make it)."""
        check_thread_id(thread_id)
        async with self.db.engine.connect() as conn:
            row = await _read(conn, thread_id)
        if row is None and allow_new:
            return
        _allowed(row, thread_id, caller)

    async def list(
        self, caller: Caller, *, page_size: int = 30, page_token: str = "", search: str = ""
    ) -> ThreadPage:
        """The caller's threads, most recently changed first, `search` matching titles."""
        if not 1 <= page_size <= MAX_PAGE:
            raise InvalidArgumentError(f"page_size must be 1-{MAX_PAGE}, not {page_size}")
        # A thread's last change: a row from before owners has only its creation time.
        changed_at = func.coalesce(_COLUMN.updated_at, _COLUMN.created_at)
        query = select(THREADS).where(_COLUMN.owner == caller.user_id)
        if search.strip():
            query = query.where(_COLUMN.title.ilike(f"%{_escaped(search.strip())}%", escape="\\"))
        if page_token:
            changed, last_id = _cursor(page_token)
            query = query.where(
                or_(changed_at < changed, and_(changed_at == changed, _COLUMN.id < last_id))
            )
        query = query.order_by(changed_at.desc(), _COLUMN.id.desc()).limit(page_size + 1)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        infos = [_info(row) for row in rows[:page_size]]
        more = len(rows) > page_size
        token = _token(infos[-1]) if more and infos else None
        return ThreadPage(threads=infos, next_page_token=token)

    async def update(
        self,
        thread_id: str,
        caller: Caller,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ThreadInfo:
        """Rename the thread and/or merge keys into its metadata (a person's title is kept:
        the automatic one never overwrites it)."""
        if title is not None:
            title = title.strip()
            if not 1 <= len(title) <= MAX_TITLE_CHARS:
                raise InvalidArgumentError(f"title must be 1-{MAX_TITLE_CHARS} characters")
        _check_metadata(metadata)
        async with self.db.engine.begin() as conn:
            current = _allowed(await _read(conn, thread_id), thread_id, caller)
            values: dict[str, Any] = {"updated_at": datetime.now(UTC)}
            merged = dict(current.metadata)
            if metadata:
                merged |= metadata
            if title is not None:
                values["title"] = title
                merged["titleRefined"] = True
            values["metadata"] = merged or None
            await conn.execute(update(THREADS).where(_COLUMN.id == thread_id).values(**values))
            return _allowed(await _read(conn, thread_id), thread_id, caller)


async def _read(conn: AsyncConnection, thread_id: str) -> Any:
    return (await conn.execute(select(THREADS).where(_COLUMN.id == thread_id))).first()


def _allowed(row: Any, thread_id: str, caller: Caller) -> ThreadInfo:
    if row is None:
        raise NotFoundError(f"thread {thread_id!r} does not exist")
    if row.owner is not None and row.owner != caller.user_id:
        raise PermissionDeniedError(f"thread {thread_id!r} belongs to another user")
    return _info(row)


def _info(row: Any) -> ThreadInfo:
    return ThreadInfo(
        thread_id=row.id,
        title=row.title or "",
        owner=row.owner,
        project_id=row.project_id,
        metadata=dict(row.metadata or {}),
        created_at=_utc(row.created_at),
        updated_at=_utc(row.updated_at or row.created_at),
        last_event_id=row.last_event_id,
    )


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _check_metadata(metadata: dict[str, Any] | None) -> None:
    if metadata and len(json.dumps(metadata)) > MAX_METADATA_CHARS:
        raise InvalidArgumentError(
            f"thread metadata is over {MAX_METADATA_CHARS} characters of JSON; keep only what "
            "identifies where the thread came from"
        )


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _token(last: ThreadInfo) -> str:
    raw = json.dumps({"at": last.updated_at.isoformat(), "id": last.thread_id})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _cursor(token: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw)
        return datetime.fromisoformat(value["at"]), str(value["id"])
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise InvalidArgumentError(
            "page_token is not one this service gave: send next_page_token from the last page, "
            "or none for the first"
        ) from None
