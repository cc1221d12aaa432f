"""Thread rows: the statements every writer of thread-scoped rows shares.

Hot-path statements run on a Core connection: the ORM session costs ~1 ms a statement."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import case, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from server.store.models import ThreadRow

__all__ = ["THREADS", "bump_event_counters", "claim_thread", "ensure_threads", "get_thread"]

THREADS = ThreadRow.metadata.tables["threads"]


async def ensure_threads(conn: AsyncConnection, thread_ids: list[str]) -> None:
    """Create the thread rows that do not exist, in one statement (safe under concurrency)."""
    now = datetime.now(UTC)
    rows = [{"id": tid, "created_at": now, "last_event_id": 0} for tid in thread_ids]
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    await conn.execute(insert(THREADS).values(rows).on_conflict_do_nothing())


async def claim_thread(
    conn: AsyncConnection, thread_id: str, user_id: str, project_id: str
) -> None:
    """A person's message arrived on the thread (its row made): it changed now, and an
    ownerless thread becomes theirs (see server/runtime/thread_directory.py)."""
    column = THREADS.c
    await conn.execute(
        update(THREADS).where(column.id == thread_id).values(updated_at=datetime.now(UTC))
    )
    await conn.execute(
        update(THREADS)
        .where(column.id == thread_id, column.owner.is_(None))
        .values(owner=user_id, project_id=project_id)
    )


async def bump_event_counters(conn: AsyncConnection, counts: dict[str, int]) -> dict[str, int]:
    """Add `counts[thread]` to each thread's event counter and return the new values, in one
    statement. The rows stay locked until the transaction ends, which is what makes ids
    unique across processes. On PostgreSQL the rows are first locked in id order, so two
    writers cannot deadlock. A thread without a row is left out of the answer (nothing was
    added for it)."""
    ids = sorted(counts)
    column = THREADS.c
    if conn.dialect.name == "postgresql":
        await conn.execute(
            select(column.id).where(column.id.in_(ids)).order_by(column.id).with_for_update()
        )
    result = await conn.execute(
        update(THREADS)
        .where(column.id.in_(ids))
        .values(last_event_id=column.last_event_id + case(counts, value=column.id))
        .returning(column.id, column.last_event_id)
    )
    return {row.id: row.last_event_id for row in result}


async def get_thread(session: AsyncSession, thread_id: str) -> ThreadRow | None:
    result = await session.execute(select(ThreadRow).where(ThreadRow.id == thread_id))
    return result.scalar_one_or_none()
