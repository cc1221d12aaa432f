"""Planned task graphs (one per thread) and the visible task checklist.

The graph is validated before it is saved, approved by a person, then worked off by the
scheduler in `server/agent/scheduler.py`, which calls `tick` for what to do next. Every
change is one transaction on the thread's row."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import select

from server.errors import InvalidArgumentError
from server.runtime.events import EventLog
from server.store import Database
from server.store.models import PlanRow
from server.store.threads import ensure_threads

__all__ = [
    "CHECKLIST_STATUS",
    "Plan",
    "PlanValidationError",
    "Plans",
    "TaskKind",
    "TaskStatus",
    "Tick",
    "checklist_of",
    "validate_plan",
]

TaskKind = Literal["delegate", "build-workflow", "checkpoint"]
TaskStatus = Literal["planned", "running", "succeeded", "failed", "cancelled"]
# How a task's status shows in the checklist.
CHECKLIST_STATUS = {
    "planned": "todo",
    "running": "in_progress",
    "succeeded": "done",
    "failed": "failed",
    "cancelled": "cancelled",
}


class PlanValidationError(InvalidArgumentError):
    """The plan is malformed; the message goes back to the model so it can revise."""


def validate_plan(tasks: list[dict[str, Any]]) -> None:
    """Duplicate ids, unknown dependencies, checkpoints without a build to check, cycles."""
    ids = [t["id"] for t in tasks]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise PlanValidationError(f"Duplicate task ids: {', '.join(duplicates)}")
    by_id = {t["id"]: t for t in tasks}
    for task in tasks:
        for dep in task["deps"]:
            if dep not in by_id:
                raise PlanValidationError(f'Task "{task["id"]}" depends on unknown task "{dep}"')
        if task["kind"] == "checkpoint" and not any(
            by_id[d]["kind"] == "build-workflow" for d in task["deps"]
        ):
            raise PlanValidationError(
                f'Checkpoint "{task["id"]}" must depend on a build-workflow task it checks'
            )
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(task_id: str, path: list[str]) -> None:
        if task_id in done:
            return
        if task_id in visiting:
            cycle = " -> ".join([*path[path.index(task_id) :], task_id])
            raise PlanValidationError(f"Dependency cycle: {cycle}")
        visiting.add(task_id)
        for dep in by_id[task_id]["deps"]:
            visit(dep, [*path, task_id])
        visiting.discard(task_id)
        done.add(task_id)

    for task_id in ids:
        visit(task_id, [])


@dataclass(frozen=True, kw_only=True)
class Plan:
    thread_id: str
    status: str
    tasks: list[dict[str, Any]]
    checklist: list[dict[str, Any]]
    message_group_id: str | None
    plan_run_id: str | None
    # The create-tasks planningContext (summary, assumptions, postBuildRunRequested).
    context: dict[str, Any] = field(default_factory=dict)

    def task(self, task_id: str) -> dict[str, Any] | None:
        return next((t for t in self.tasks if t["id"] == task_id), None)


@dataclass(frozen=True, kw_only=True)
class Tick:
    """What the scheduler should do next: nothing, start tasks, replan, or synthesize."""

    action: Literal["none", "dispatch", "replan", "synthesize"]
    tasks: list[dict[str, Any]]


def checklist_of(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"id": t["id"], "description": t["title"], "status": CHECKLIST_STATUS[t["status"]]}
        | ({"detail": t["error"]} if t.get("error") else {})
        for t in tasks
    ]


@dataclass(kw_only=True)
class Plans:
    """Changes to one thread's plan take turns (tasks settle concurrently, and each change
    reads and rewrites the graph)."""

    db: Database
    events: EventLog
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def _lock(self, thread_id: str) -> asyncio.Lock:
        return self._locks.setdefault(thread_id, asyncio.Lock())

    async def active(self) -> list[Plan]:
        """Every plan being executed (status active)."""
        async with self.db.session() as session:
            rows = await session.scalars(select(PlanRow).where(PlanRow.status == "active"))
            return [_plan(row) for row in rows]

    async def get(self, thread_id: str) -> Plan | None:
        async with self.db.session() as session:
            row = await session.get(PlanRow, thread_id)
            return _plan(row) if row else None

    async def propose(
        self,
        thread_id: str,
        *,
        run_id: str,
        message_group_id: str | None,
        tasks: list[Any],
        context: dict[str, Any] | None = None,
    ) -> Plan:
        """Save a new graph awaiting approval (replacing any earlier one) and show it."""
        validate_plan(tasks)
        planned = [t | {"status": "planned"} for t in tasks]
        async with self._lock(thread_id):
            plan = await self._write(
                thread_id,
                status="awaiting_approval",
                tasks=planned,
                message_group_id=message_group_id,
                plan_run_id=run_id,
                context=context or {},
            )
        await self.publish(thread_id, run_id, plan.checklist)
        return plan

    async def _set_status_locked(self, thread_id: str, status: str, *, run_id: str | None) -> Plan:
        plan = await self._require(thread_id)
        cleared = status in ("cancelled", "awaiting_approval")
        updated = await self._write(thread_id, status=status, tasks=plan.tasks, clear=cleared)
        if cleared:
            await self.publish(thread_id, run_id, [], plan_items=True)
        return updated

    async def _update_task_locked(
        self, thread_id: str, task_id: str, *, run_id: str | None, **changes: Any
    ) -> Plan:
        """Change one task; a failure or a cancel cancels every task that depends on it,
        transitively, saying which dependency ended how and why."""
        plan = await self._require(thread_id)
        tasks = [dict(t) for t in plan.tasks]
        by_id = {t["id"]: t for t in tasks}
        by_id[task_id].update(changes)
        if changes.get("status") in ("failed", "cancelled"):
            cause = f'Cancelled: dependency "{task_id}" {changes["status"]}'
            if changes.get("error") and changes["status"] == "failed":
                cause += f": {changes['error']}"
            failed = {task_id}
            grew = True
            while grew:
                grew = False
                for task in tasks:
                    if task["status"] in ("planned", "running") and failed & set(task["deps"]):
                        task["status"] = "cancelled"
                        task["error"] = cause
                        failed.add(task["id"])
                        grew = True
        updated = await self._write(thread_id, status=plan.status, tasks=tasks)
        await self.publish(thread_id, run_id, updated.checklist)
        return updated

    async def _tick_locked(self, thread_id: str, *, available_slots: int) -> Tick:
        plan = await self.get(thread_id)
        if plan is None or plan.status != "active":
            return Tick(action="none", tasks=[])
        failed = [t for t in plan.tasks if t["status"] == "failed"]
        if failed:
            await self._write(thread_id, status="awaiting_replan", tasks=plan.tasks)
            return Tick(action="replan", tasks=failed)
        if all(t["status"] not in ("planned", "running") for t in plan.tasks):
            await self._write(thread_id, status="completed", tasks=plan.tasks)
            return Tick(action="synthesize", tasks=plan.tasks)
        status = {t["id"]: t["status"] for t in plan.tasks}
        ready = [
            t
            for t in plan.tasks
            if t["status"] == "planned" and all(status[d] == "succeeded" for d in t["deps"])
        ]
        if not ready or available_slots <= 0:
            return Tick(action="none", tasks=[])
        ready.sort(key=lambda t: t["kind"] != "checkpoint")  # checkpoints go first
        return Tick(action="dispatch", tasks=ready[:available_slots])

    async def set_status(self, thread_id: str, status: str, *, run_id: str | None) -> Plan:
        async with self._lock(thread_id):
            return await self._set_status_locked(thread_id, status, run_id=run_id)

    async def update_task(
        self, thread_id: str, task_id: str, *, run_id: str | None, **changes: Any
    ) -> Plan:
        async with self._lock(thread_id):
            return await self._update_task_locked(thread_id, task_id, run_id=run_id, **changes)

    async def settle_checkpoint(
        self, thread_id: str, task_id: str, *, run_id: str | None, **changes: Any
    ) -> Plan:
        """`complete-checkpoint`: only a running checkpoint task is settled this way."""
        async with self._lock(thread_id):
            plan = await self._require(thread_id)
            task = plan.task(task_id)
            if task is None:
                known = ", ".join(t["id"] for t in plan.tasks if t["kind"] == "checkpoint")
                raise InvalidArgumentError(
                    f"the plan has no task {task_id!r}; its checkpoints: {known or 'none'}"
                )
            if task["kind"] != "checkpoint":
                raise InvalidArgumentError(
                    f"task {task_id!r} is a {task['kind']} task, not a checkpoint: only "
                    "checkpoints are completed this way"
                )
            if task["status"] != "running":
                raise InvalidArgumentError(
                    f"checkpoint {task_id!r} is {task['status']}, not running: complete a "
                    "checkpoint once, in the run that executes it"
                )
            return await self._update_task_locked(thread_id, task_id, run_id=run_id, **changes)

    async def tick(self, thread_id: str, *, available_slots: int) -> Tick:
        async with self._lock(thread_id):
            return await self._tick_locked(thread_id, available_slots=available_slots)

    async def save_checklist(
        self, thread_id: str, items: list[dict[str, Any]], *, run_id: str | None
    ) -> None:
        """The lightweight checklist of `update-tasks` (no graph behind it)."""
        async with self.db.session() as session, session.begin():
            row = await session.get(PlanRow, thread_id)
            if row is None:
                await ensure_threads(await session.connection(), [thread_id])
                row = PlanRow(thread_id=thread_id, status="none", tasks=[], checklist=[])
                session.add(row)
            row.checklist = items
            row.updated_at = datetime.now(UTC)
        await self.publish(thread_id, run_id, items)

    async def publish(
        self,
        thread_id: str,
        run_id: str | None,
        items: list[dict[str, Any]],
        *,
        plan_items: bool = False,
    ) -> None:
        payload: dict[str, Any] = {"tasks": {"tasks": items}}
        if plan_items:
            payload["planItems"] = []
        await self.events.append(thread_id, "tasks-update", payload, run_id=run_id)

    async def _require(self, thread_id: str) -> Plan:
        plan = await self.get(thread_id)
        if plan is None:
            raise InvalidArgumentError(f"thread {thread_id!r} has no plan")
        return plan

    async def _write(
        self,
        thread_id: str,
        *,
        status: str,
        tasks: list[dict[str, Any]],
        clear: bool = False,
        message_group_id: str | None = None,
        plan_run_id: str | None = None,
        context: dict[str, Any] | None = None,
    ) -> Plan:
        async with self.db.session() as session, session.begin():
            row = await session.get(PlanRow, thread_id)
            if row is None:
                await ensure_threads(await session.connection(), [thread_id])
                row = PlanRow(thread_id=thread_id)
                session.add(row)
            row.status = status
            row.tasks = tasks
            row.checklist = [] if clear else checklist_of(tasks)
            if plan_run_id is not None:
                row.plan_run_id = plan_run_id
                row.message_group_id = message_group_id
                row.context = context or {}
            row.updated_at = datetime.now(UTC)
            return _plan(row)


def _plan(row: PlanRow) -> Plan:
    return Plan(
        thread_id=row.thread_id,
        status=row.status,
        tasks=list(row.tasks),
        checklist=list(row.checklist),
        message_group_id=row.message_group_id,
        plan_run_id=row.plan_run_id,
        context=dict(row.context or {}),
    )
