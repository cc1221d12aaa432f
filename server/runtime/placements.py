"""Which container engine each thread's sandbox lives on, when sandboxes span several.

A thread's engine is chosen by rendezvous hashing over the engines that answer
(`sandbox/placement.py`) when its sandbox is first needed, written down, and kept while that
engine answers: every replica reads the same row, so all of them reach the same sandbox. Only
when its engine is away does a thread move (a conditional update: one replica moves it, and
only that one reports the workspace lost).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite

from server.store import Database
from server.store.models import SandboxPlacementRow

__all__ = ["Placements"]

PLACEMENTS = SandboxPlacementRow.metadata.tables["sandbox_placements"]


class Placements:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._known: dict[str, str] = {}

    async def engine_of(self, thread_id: str, *, fresh: bool = False) -> str | None:
        """The engine the thread's sandbox was placed on (None: not placed yet). Cached;
        `fresh` reads the row again (another replica may have moved it)."""
        if not fresh and thread_id in self._known:
            return self._known[thread_id]
        async with self.db.engine.connect() as conn:
            engine = await conn.scalar(
                select(PLACEMENTS.c.engine).where(PLACEMENTS.c.thread_id == thread_id)
            )
        return self._remember(thread_id, engine)

    async def place(self, thread_id: str, engine: str) -> str:
        """Place the thread on `engine` unless another replica placed it first; the engine
        it is placed on."""
        insert = postgresql.insert if self.db.engine.dialect.name == "postgresql" else sqlite.insert
        row = {"thread_id": thread_id, "engine": engine, "placed_at": datetime.now(UTC)}
        async with self.db.engine.begin() as conn:
            await conn.execute(insert(PLACEMENTS).values(row).on_conflict_do_nothing())
        return await self.engine_of(thread_id, fresh=True) or engine

    async def move(self, thread_id: str, away_from: str, to: str) -> bool:
        """Move the thread off an engine that is away; False when another replica did."""
        column = PLACEMENTS.c
        async with self.db.engine.begin() as conn:
            moved = await conn.execute(
                update(PLACEMENTS)
                .where(column.thread_id == thread_id, column.engine == away_from)
                .values(engine=to, placed_at=datetime.now(UTC))
            )
        await self.engine_of(thread_id, fresh=True)
        return bool(moved.rowcount)

    def _remember(self, thread_id: str, engine: str | None) -> str | None:
        if engine is None:
            self._known.pop(thread_id, None)
        else:
            self._known[thread_id] = engine
        return engine
