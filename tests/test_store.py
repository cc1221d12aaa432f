"""The store on both databases: migrations match the models, and the workflow store's saves."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection

from server.domain.workflows import WorkflowStore
from server.instance.types import WorkflowContent, WorkflowGoneError
from server.runtime.events import EventLog
from server.store import Database
from server.store.models import Base

ROOT = Path(__file__).resolve().parents[1]


def _differences(connection: Connection) -> list[Any]:
    return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))


async def test_migrations_build_exactly_the_models(database_url: str) -> None:
    db = await Database.open(database_url)
    try:
        async with db.engine.connect() as conn:
            assert await conn.run_sync(_differences) == []
    finally:
        await db.close()


def content(name: str) -> WorkflowContent:
    return WorkflowContent(name=name, nodes=[{"name": "A"}], connections={}, settings={})


async def test_concurrent_saves_of_one_workflow_get_distinct_version_numbers(
    database_url: str,
) -> None:
    db = await Database.open(database_url)
    events = EventLog(db=db)
    events.start()
    try:
        await events.append("t1", "thread-created")
        store = WorkflowStore(db)
        first = await store.save_from_source(
            thread_id="t1",
            file_path="src/a.ts",
            source_hash="h0",
            content=content("A"),
            workflow_id=None,
        )
        saves = [
            store.save_from_source(
                thread_id="t1",
                file_path=f"src/{n}.ts",
                source_hash=f"h{n}",
                content=content(f"A{n}"),
                workflow_id=first.id,
            )
            for n in range(1, 6)
        ]
        saved = await asyncio.gather(*saves)
        assert sorted(s.version_number for s in saved) == [2, 3, 4, 5, 6]
        assert await store.version_count(first.id) == 6
        await store.set_archived(first.id, True)
        with pytest.raises(WorkflowGoneError) as gone:
            await store.save_from_source(
                thread_id="t1",
                file_path="src/a.ts",
                source_hash="h9",
                content=content("A"),
                workflow_id=first.id,
            )
        assert gone.value.archived
        assert await store.version_count(first.id) == 6
        binding = await store.binding("t1", "src/a.ts")
        assert binding is not None and binding.source_hash == "h0"
    finally:
        await events.close()
        await db.close()


OPEN_DATABASE = """
import asyncio, sys
from server.store import Database
from server.store.deployment import deployment_id

async def main():
    db = await Database.open(sys.argv[1])
    print(await deployment_id(db))
    await db.close()

asyncio.run(main())
"""


async def test_processes_opening_a_new_database_at_once_migrate_it_once(
    database_url: str,
) -> None:
    """Replicas starting at the same moment on a fresh database all start, on one
    deployment (the migrations ran once)."""
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            OPEN_DATABASE,
            database_url,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    results = [await asyncio.wait_for(p.communicate(), 120) for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0], [
        err.decode()[-800:] for _, err in results
    ]
    # Each process's last line is its deployment id; the lines before are its log (structlog
    # writes to stdout when nothing configured it), whose timestamps differ.
    ids = {out.decode().strip().splitlines()[-1] for out, _ in results}
    assert len(ids) == 1, ids
