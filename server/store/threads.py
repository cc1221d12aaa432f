"""Thread rows: the statements every writer of thread-scoped rows shares."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from server.store.models import ThreadRow


async def ensure_thread(session: AsyncSession, thread_id: str) -> None:
    """Create the thread row unless it exists (safe under concurrent callers)."""
    values = {"id": thread_id, "created_at": datetime.now(UTC), "last_event_id": 0}
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    await session.execute(insert(ThreadRow).values(**values).on_conflict_do_nothing())


async def get_thread(session: AsyncSession, thread_id: str) -> ThreadRow | None:
    result = await session.execute(select(ThreadRow).where(ThreadRow.id == thread_id))
    return result.scalar_one_or_none()
