"""The embedded instance's activity log: every change to its workflows and credentials, as
n8n's own log keeps it (category, action, the resource, who, which project, a small detail).

The stores write an entry in the transaction of the change they make (`record`), so a change
and its entry land together or not at all. Who made it is the acting caller of the call that
made it (`server.core.caller.acting`); the project is the resource's.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core.caller import Caller, acting
from server.instance.types import ActivityEntry, ActivityExpansion
from server.store import Database
from server.store.models import ActivityEventRow

__all__ = ["ACTIVITY", "ActivityStore", "record", "saved_detail"]

ACTIVITY = ActivityEventRow.metadata.tables["activity_events"]
_C = ACTIVITY.c

# n8n's budget for a detail: the node types named (more are counted), a name's length.
MAX_LISTED_TYPES = 5
MAX_DETAIL_STRING = 64
CORE_PREFIX = "n8n-nodes-base."


async def record(
    conn: AsyncConnection,
    *,
    category: str,
    action: str,
    project_id: str | None,
    resource_type: str,
    resource_id: str,
    resource_name: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Write one entry in the caller's transaction, as made by the acting caller."""
    who = acting.get()
    await conn.execute(
        insert(ACTIVITY).values(
            created_at=datetime.now(UTC),
            category=category,
            action=action,
            user_id=who.user_id if who is not None else None,
            project_id=Caller.project_of(project_id),
            resource_type=resource_type,
            resource_id=resource_id,
            resource_name=resource_name,
            data=data or None,
        )
    )


def saved_detail(nodes: list[Any], previous: list[Any] | None = None) -> dict[str, Any]:
    """A save's detail: its node count, and against the version before it the node types
    added and removed (short names for core nodes; the first few named, all counted)."""
    detail: dict[str, Any] = {"nodeCount": len(nodes)}
    if previous is None:
        return detail
    after, before = _types(nodes), _types(previous)
    for key, types in (("nodesAdded", after - before), ("nodesRemoved", before - after)):
        listed = sorted(types)
        if listed:
            detail[key] = listed[:MAX_LISTED_TYPES]
            if len(listed) > MAX_LISTED_TYPES:
                detail[f"{key}Total"] = len(listed)
    return detail


def clip(text: str) -> str:
    return text[:MAX_DETAIL_STRING]


def _types(nodes: Iterable[Any]) -> set[str]:
    return {
        str(n.get("type") or "unknown").removeprefix(CORE_PREFIX)
        for n in nodes
        if isinstance(n, dict)
    }


class ActivityStore:
    """Reads the log (the `Activity` seam)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def feed(
        self,
        *,
        project_ids: list[str],
        limit: int,
        category: str | None = None,
        resource_id: str | None = None,
        before_id: int | None = None,
    ) -> list[ActivityEntry]:
        if limit <= 0 or not project_ids:
            return []
        query = select(ACTIVITY).where(_C.project_id.in_(project_ids))
        if category is not None:
            query = query.where(_C.category == category)
        if resource_id is not None:
            query = query.where(_C.resource_id == resource_id)
        if before_id is not None:
            query = query.where(_C.id < before_id)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query.order_by(_C.id.desc()).limit(limit))).all()
        return [_entry(row) for row in rows]

    async def expand(
        self, entry_id: int, *, project_ids: list[str], history: int
    ) -> ActivityExpansion | None:
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(ACTIVITY).where(_C.id == entry_id, _C.project_id.in_(project_ids))
                )
            ).first()
            if row is None:
                return None
            others: list[Any] = []
            if row.resource_type and row.resource_id:
                others = list(
                    (
                        await conn.execute(
                            select(ACTIVITY)
                            .where(
                                _C.resource_type == row.resource_type,
                                _C.resource_id == row.resource_id,
                                _C.project_id.in_(project_ids),
                                _C.id != row.id,
                            )
                            .order_by(_C.id.desc())
                            .limit(history)
                        )
                    ).all()
                )
        return ActivityExpansion(entry=_entry(row), resource_history=[_entry(o) for o in others])


def _entry(row: Any) -> ActivityEntry:
    at = row.created_at
    return ActivityEntry(
        id=int(row.id),
        at=at if at.tzinfo else at.replace(tzinfo=UTC),
        category=row.category,
        action=row.action,
        user_id=row.user_id,
        project_id=row.project_id,
        resource_type=row.resource_type,
        resource_id=row.resource_id,
        resource_name=row.resource_name,
        detail=dict(row.data) if row.data else None,
    )
