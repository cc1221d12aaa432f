"""Source bindings: which workflow a thread's source file builds, and the source last saved.
The service's own record, not the instance's data: it stays in the service's database
whether the embedded store or n8n keeps the workflow."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from server.instance.types import Binding
from server.store import Database
from server.store.models import SourceBindingRow

__all__ = ["BINDINGS", "bind_source", "source_binding"]

BINDINGS = SourceBindingRow.metadata.tables["source_bindings"]


async def source_binding(db: Database, thread_id: str, file_path: str) -> Binding | None:
    """Which workflow a thread's source file builds (the service's own record, whatever
    instance keeps the workflow)."""
    async with db.session() as session:
        row = await session.get(SourceBindingRow, (thread_id, file_path))
        if row is None:
            return None
        return Binding(
            workflow_id=row.workflow_id, source_hash=row.source_hash, version_id=row.version_id
        )


async def bind_source(
    conn: AsyncConnection, *, thread_id: str, file_path: str, binding: Binding
) -> None:
    """Bind a thread's source file to the workflow it built (insert or replace)."""
    upsert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(
        BINDINGS
    ).values(
        thread_id=thread_id,
        file_path=file_path,
        workflow_id=binding.workflow_id,
        source_hash=binding.source_hash,
        version_id=binding.version_id,
        updated_at=datetime.now(UTC),
    )
    await conn.execute(
        upsert.on_conflict_do_update(
            index_elements=[BINDINGS.c.thread_id, BINDINGS.c.file_path],
            set_={
                "workflow_id": upsert.excluded.workflow_id,
                "source_hash": upsert.excluded.source_hash,
                "version_id": upsert.excluded.version_id,
                "updated_at": upsert.excluded.updated_at,
            },
        )
    )
