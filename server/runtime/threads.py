"""Threads and their runs: status, deletion, and the one-active-run rule."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from server.core.caller import LOCAL, Caller
from server.core.ids import new_id
from server.core.validation import check_thread_id
from server.errors import FailedPreconditionError, NotFoundError
from server.runtime.events import EventLog
from server.store import Database
from server.store.models import (
    ConfirmationRow,
    EventRow,
    MessageRow,
    PermissionRow,
    PlanRow,
    RunRow,
    SandboxPlacementRow,
    SourceBindingRow,
    ThreadRow,
    WorkItemRow,
)
from server.store.threads import THREADS, claim_thread, ensure_threads, get_thread

__all__ = [
    "FINAL_RUN_STATES",
    "OPEN_RUN_STATES",
    "BackgroundTaskInfo",
    "RunInfo",
    "ThreadStatus",
    "Threads",
]

# A run in one of these holds the thread (a partial unique index enforces one per thread).
OPEN_RUN_STATES = ("active", "suspended")
FINAL_RUN_STATES = ("completed", "cancelled", "error", "interrupted")


@dataclass(frozen=True, kw_only=True)
class BackgroundTaskInfo:
    task_id: str
    role: str
    agent_id: str
    status: str
    started_at: datetime
    run_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    id: str
    thread_id: str
    status: str
    kind: str
    message_group_id: str | None
    state: dict[str, Any] | None
    caller: Caller
    # The replica driving it (see server/runtime/replicas.py); None before replicas.
    owner: str | None = None

    @classmethod
    def of(cls, row: RunRow) -> RunInfo:
        return cls(
            owner=row.owner,
            id=row.id,
            thread_id=row.thread_id,
            status=row.status,
            kind=row.kind,
            message_group_id=row.message_group_id,
            state=row.state,
            caller=Caller.from_json(row.caller),
        )


@dataclass(frozen=True, kw_only=True)
class ThreadStatus:
    thread_id: str
    has_active_run: bool
    is_suspended: bool
    active_run_id: str | None
    last_event_id: int
    background_tasks: list[BackgroundTaskInfo] = field(default_factory=list)


async def _nothing(_thread_id: str) -> None:
    return None


def _no_tasks(_thread_id: str) -> list[BackgroundTaskInfo]:
    return []


@dataclass(kw_only=True)
class Threads:
    db: Database
    events: EventLog
    # Called after a thread is deleted, e.g. to destroy its sandbox.
    on_deleted: Callable[[str], Awaitable[None]] = _nothing
    # The thread's running background tasks (they live in memory, see background.py).
    background: Callable[[str], list[BackgroundTaskInfo]] = _no_tasks
    # This replica's id: the owner of the runs it starts or resumes.
    replica: str | None = None
    _known: set[str] = field(default_factory=set)

    async def exists(self, thread_id: str) -> bool:
        """Cached once seen: threads end only through `delete` (in another process, the
        sandbox janitor catches up)."""
        if thread_id in self._known:
            return True
        async with self.db.session() as session:
            found = await get_thread(session, thread_id) is not None
        if found:
            self._known.add(thread_id)
        return found

    async def status(self, thread_id: str) -> ThreadStatus:
        check_thread_id(thread_id)
        async with self.db.session() as session:
            thread = await _existing(session, thread_id)
            run = (
                await session.execute(
                    select(RunRow).where(
                        RunRow.thread_id == thread_id, RunRow.status.in_(OPEN_RUN_STATES)
                    )
                )
            ).scalar_one_or_none()
        return ThreadStatus(
            thread_id=thread_id,
            has_active_run=run is not None,
            is_suspended=run is not None and run.status == "suspended",
            active_run_id=run.id if run is not None else None,
            last_event_id=thread.last_event_id,
            background_tasks=self.background(thread_id),
        )

    async def delete(self, thread_id: str) -> None:
        """Delete the thread with its runs and events; live subscribers are ended."""
        check_thread_id(thread_id)
        async with self.db.session() as session, session.begin():
            await _existing(session, thread_id)
            # Explicit deletes as well as ON DELETE CASCADE: the result must not depend on a
            # connection having foreign keys switched on.
            await session.execute(delete(EventRow).where(EventRow.thread_id == thread_id))
            await session.execute(delete(RunRow).where(RunRow.thread_id == thread_id))
            for table in (
                SourceBindingRow,
                WorkItemRow,
                MessageRow,
                ConfirmationRow,
                PermissionRow,
                PlanRow,
                SandboxPlacementRow,
            ):
                await session.execute(delete(table).where(table.thread_id == thread_id))
            await session.execute(delete(ThreadRow).where(ThreadRow.id == thread_id))
        self._known.discard(thread_id)
        self.events.end_subscriptions(
            lambda _cursor: NotFoundError(f"thread {thread_id!r} was deleted"),
            thread_id=thread_id,
        )
        await self.on_deleted(thread_id)

    async def start_run(
        self,
        thread_id: str,
        *,
        message_id: str | None = None,
        kind: str = "chat",
        message_group_id: str | None = None,
        caller: Caller = LOCAL,
        message: str | None = None,
    ) -> str:
        """Open a run (creating the thread if new, the caller's when it has no owner) and
        announce it with `run-start`. `message`: the person's words, for the history."""
        check_thread_id(thread_id)
        run_id = new_id("run")
        try:
            async with self.db.engine.begin() as conn:
                await ensure_threads(conn, [thread_id])
                if message is not None:
                    await claim_thread(conn, thread_id, caller.user_id, caller.project_id)
                await conn.execute(
                    insert(RunRow).values(
                        message=message,
                        message_id=message_id or None,
                        id=run_id,
                        thread_id=thread_id,
                        status="active",
                        started_at=datetime.now(UTC),
                        kind=kind,
                        message_group_id=message_group_id,
                        caller=caller.as_json(),
                        owner=self.replica,
                    )
                )
        except IntegrityError:
            raise FailedPreconditionError(
                f"thread {thread_id!r} already has an active run; wait for it to finish or "
                "cancel it with CancelRun"
            ) from None
        payload = {"messageId": message_id or ""}
        if message_group_id:
            payload["messageGroupId"] = message_group_id
        await self.events.append(thread_id, "run-start", payload, run_id=run_id)
        return run_id

    async def title_if_unset(self, thread_id: str, title: str) -> None:
        """The automatic title (from the first message), unless a person named the thread."""
        column = THREADS.c
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(THREADS)
                .where(column.id == thread_id, or_(column.title.is_(None), column.title == ""))
                .values(title=title)
            )

    async def run(self, run_id: str) -> RunInfo | None:
        async with self.db.session() as session:
            row = await session.get(RunRow, run_id)
            return RunInfo.of(row) if row else None

    async def open_runs(self) -> list[RunInfo]:
        """Every active or suspended run (recovery at start-up)."""
        async with self.db.session() as session:
            rows = await session.execute(select(RunRow).where(RunRow.status.in_(OPEN_RUN_STATES)))
            return [RunInfo.of(row) for row in rows.scalars()]

    async def orphaned_runs(
        self, owned_by_live: Callable[[ColumnElement[str | None]], ColumnElement[bool]]
    ) -> list[RunInfo]:
        """Active runs that no live replica drives: theirs died (or they predate replicas)."""
        owner = RunRow.__table__.c.owner
        async with self.db.session() as session:
            rows = await session.execute(
                select(RunRow).where(
                    RunRow.status == "active", or_(owner.is_(None), ~owned_by_live(owner))
                )
            )
            return [RunInfo.of(row) for row in rows.scalars()]

    async def save_state(
        self, run_id: str, state: dict[str, Any] | None, *, status: str | None = None
    ) -> bool:
        """Store an open run's loop state (and move it between active and suspended; the
        replica that makes it active drives it). False if the run is no longer open
        (cancelled, or ended because its replica was taken for dead)."""
        values: dict[str, Any] = {"state": state}
        if status is not None:
            values["status"] = status
        if status == "active":
            values["owner"] = self.replica
        async with self.db.session() as session, session.begin():
            changed = await session.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.status.in_(OPEN_RUN_STATES))
                .values(**values)
            )
        return bool(changed.rowcount)  # type: ignore[attr-defined]

    async def finish_run(
        self, thread_id: str, run_id: str, *, status: str, reason: str | None = None
    ) -> bool:
        """Close an open run with a final status and `run-finish`. False if already closed."""
        if status not in FINAL_RUN_STATES:
            raise ValueError(f"run status must be one of {FINAL_RUN_STATES}, not {status!r}")
        async with self.db.session() as session, session.begin():
            closed = await session.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.status.in_(OPEN_RUN_STATES))
                .values(status=status, reason=reason, finished_at=datetime.now(UTC))
            )
        if closed.rowcount == 0:  # type: ignore[attr-defined]
            return False
        payload = {"status": status} | ({"reason": reason} if reason else {})
        await self.events.append(thread_id, "run-finish", payload, run_id=run_id)
        return True

    async def cancel_run(self, thread_id: str) -> str | None:
        """Cancel the thread's open run, if any. Idempotent: returns None when nothing ran."""
        status = await self.status(thread_id)
        if status.active_run_id is None:
            return None
        cancelled = await self.finish_run(
            thread_id, status.active_run_id, status="cancelled", reason="user_cancelled"
        )
        return status.active_run_id if cancelled else None


async def _existing(session: AsyncSession, thread_id: str) -> ThreadRow:
    thread = await get_thread(session, thread_id)
    if thread is None:
        raise NotFoundError(f"thread {thread_id!r} does not exist")
    return thread
