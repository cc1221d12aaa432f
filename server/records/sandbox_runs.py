"""The runs this service makes in its sandboxes (verification and `run-workflow`), from their
start (status `running`) to their end. The service's own records: the embedded instance's
executions are these alone; an n8n instance lists them beside n8n's own."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select

from server.core.ids import new_id
from server.errors import FailedPreconditionError, NotFoundError
from server.instance.types import Execution
from server.store import Database
from server.store.models import ExecutionRow

__all__ = ["FINISHED", "ExecutionStore"]

FINISHED = ("success", "error", "canceled", "waiting")


def _execution(row: ExecutionRow) -> Execution:
    return Execution(
        id=row.id,
        workflow_id=row.workflow_id,
        version_id=row.version_id,
        thread_id=row.thread_id,
        mode=row.mode,
        status=row.status,
        is_verification=row.is_verification,
        trigger_node=row.trigger_node,
        started_at=row.started_at,
        finished_at=row.finished_at,
        result=dict(row.result or {}),
        error=row.error,
    )


class ExecutionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def start(
        self,
        *,
        workflow_id: str,
        version_id: str,
        thread_id: str,
        mode: str,
        trigger_node: str | None,
        is_verification: bool = False,
    ) -> Execution:
        row = ExecutionRow(
            id=new_id("exe"),
            workflow_id=workflow_id,
            version_id=version_id,
            thread_id=thread_id,
            mode=mode,
            status="running",
            is_verification=is_verification,
            trigger_node=trigger_node,
            started_at=datetime.now(UTC),
        )
        async with self.db.session() as session, session.begin():
            session.add(row)
        return _execution(row)

    async def finish(
        self, execution_id: str, *, status: str, result: dict[str, Any], error: str | None
    ) -> Execution:
        async with self.db.session() as session, session.begin():
            row = await session.get(ExecutionRow, execution_id)
            if row is None:
                raise NotFoundError(f"execution {execution_id!r} does not exist")
            row.status, row.result, row.error = status, result, error
            row.finished_at = datetime.now(UTC)
            return _execution(row)

    async def require(self, execution_id: str) -> Execution:
        async with self.db.session() as session:
            row = await session.get(ExecutionRow, execution_id)
        if row is None:
            raise NotFoundError(f"execution {execution_id!r} does not exist")
        return _execution(row)

    async def listing(
        self, *, workflow_id: str | None = None, status: str | None = None, limit: int = 20
    ) -> list[Execution]:
        statement = select(ExecutionRow).order_by(ExecutionRow.started_at.desc()).limit(limit)
        if workflow_id:
            statement = statement.where(ExecutionRow.workflow_id == workflow_id)
        if status:
            statement = statement.where(ExecutionRow.status == status)
        async with self.db.session() as session:
            return [_execution(row) for row in (await session.scalars(statement)).all()]

    async def delete_test_runs(self, workflow_id: str, *, older_than: datetime) -> int:
        """Delete a workflow's finished manual and verification runs started before
        `older_than` (runs still going are kept)."""
        async with self.db.session() as session, session.begin():
            done = await session.execute(
                delete(ExecutionRow).where(
                    ExecutionRow.workflow_id == workflow_id,
                    ExecutionRow.started_at < older_than,
                    ExecutionRow.status.in_(FINISHED),
                    (ExecutionRow.mode == "manual") | ExecutionRow.is_verification,
                )
            )
            return int(done.rowcount)  # type: ignore[attr-defined]

    async def stop_in_instance(self, execution_id: str) -> tuple[bool, str]:
        """Every run kept here is this service's own (the runner stops those)."""
        raise FailedPreconditionError(
            f"execution {execution_id} ran in a sandbox: the runner stops it, not the instance"
        )
