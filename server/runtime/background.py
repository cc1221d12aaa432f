"""Background tasks: detached agents working for a thread while its conversation goes on.

At most `limit` run per thread. A task may be deduplicated by key (its planned task id, else
role and workflow), corrected while it runs (the corrections queue wakes it), and cancelled
from the tool, `Agent.CancelTask`, `CancelRun` or shutdown. Cancelling removes the task at
once; a person's cancel settles it like a finish (its completion hook hears `cancelled`, so a
plan moves on), while shutdown and thread deletion call no hook. Cleanup belongs in the
task's own `finally`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import structlog

from server.core.ids import new_id
from server.runtime.events import ORCHESTRATOR, EventLog
from server.runtime.replicas import Replicas
from server.runtime.threads import BackgroundTaskInfo

__all__ = [
    "BackgroundTasks",
    "CorrectionResult",
    "Settled",
    "Spawned",
    "TaskBody",
    "TaskHandle",
    "TaskOutcome",
]

log = structlog.get_logger(__name__)

CorrectionResult = Literal["queued", "task-completed", "task-not-found"]


@dataclass(kw_only=True)
class TaskHandle:
    """What a running task sees of itself."""

    task_id: str
    agent_id: str
    thread_id: str
    run_id: str | None
    corrections: asyncio.Queue[str] = field(default_factory=asyncio.Queue)

    def drain_corrections(self) -> list[str]:
        drained = []
        while not self.corrections.empty():
            drained.append(self.corrections.get_nowait())
        return drained


@dataclass(frozen=True, kw_only=True)
class TaskOutcome:
    """How a task ended: its result, its error, or cancelled by a person."""

    status: Literal["completed", "error", "cancelled"]
    result: str = ""
    error: str | None = None


TaskBody = Callable[[TaskHandle], Awaitable[str]]
Settled = Callable[[TaskHandle, TaskOutcome], Awaitable[None]]


@dataclass(kw_only=True)
class _Running:
    handle: TaskHandle
    role: str
    key: str | None
    started_at: datetime
    task: asyncio.Task[None] | None = None
    on_settled: Settled | None = None
    # Its work is over and its completion is being recorded: too late to cancel.
    settling: bool = False


@dataclass(frozen=True, kw_only=True)
class Spawned:
    status: Literal["started", "limit-reached", "duplicate"]
    task_id: str | None = None
    agent_id: str | None = None


@dataclass(kw_only=True)
class BackgroundTasks:
    events: EventLog
    limit: int = 5
    # A task still working after this long is stopped and settles as an error (a stuck model
    # stream or tool would otherwise hold its slot, and its plan, for ever).
    timeout_s: float = 3600.0
    # Tasks live in the memory of the replica that spawned them: a cancel or a correction
    # made on another replica is handed to every replica (None: this process alone).
    replicas: Replicas | None = None
    _threads: dict[str, dict[str, _Running]] = field(default_factory=dict)
    _finished: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.replicas is not None:
            self.replicas.handle("cancel-task", self._cancel_asked)
            self.replicas.handle("correct-task", self._correct_asked)

    async def cancel_anywhere(self, thread_id: str, task_id: str) -> bool:
        """Cancel the task on whichever replica runs it (`cancel` here and on the others)."""
        if self.replicas is None:
            return await self.cancel(thread_id, task_id)
        args = {"thread": thread_id, "task": task_id}
        return any(await self.replicas.ask("cancel-task", args))

    async def correct_anywhere(
        self, thread_id: str, task_id: str, correction: str
    ) -> CorrectionResult:
        """Queue a correction for the task on whichever replica runs it."""
        if self.replicas is None:
            return self.correct(thread_id, task_id, correction)
        args = {"thread": thread_id, "task": task_id, "correction": correction}
        answers = set(await self.replicas.ask("correct-task", args))
        for result in ("queued", "task-completed"):
            if result in answers:
                return result
        return "task-not-found"

    async def _cancel_asked(self, args: dict[str, str]) -> bool:
        return await self.cancel(args["thread"], args["task"])

    async def _correct_asked(self, args: dict[str, str]) -> CorrectionResult:
        return self.correct(args["thread"], args["task"], args["correction"])

    def running(self, thread_id: str) -> list[BackgroundTaskInfo]:
        return [
            BackgroundTaskInfo(
                task_id=r.handle.task_id,
                role=r.role,
                agent_id=r.handle.agent_id,
                status="running",
                started_at=r.started_at,
                run_id=r.handle.run_id,
            )
            for r in self._threads.get(thread_id, {}).values()
        ]

    def keys(self) -> set[str]:
        """The deduplication keys of the tasks running here."""
        return {
            r.key for tasks in self._threads.values() for r in tasks.values() if r.key is not None
        }

    async def spawn(
        self,
        thread_id: str,
        *,
        role: str,
        body: TaskBody,
        run_id: str | None,
        tools: list[str],
        title: str = "",
        key: str | None = None,
        on_settled: Settled | None = None,
        kind: str | None = None,
        goal: str | None = None,
        workflow_id: str | None = None,
    ) -> Spawned:
        """`kind` is the contract's agent kind (which card the editor shows), `goal` the full
        task and `workflow_id` the workflow it works on, all for the `agent-spawned` card."""
        tasks = self._threads.setdefault(thread_id, {})
        if key is not None:
            for existing in tasks.values():
                if existing.key == key:
                    return Spawned(
                        status="duplicate",
                        task_id=existing.handle.task_id,
                        agent_id=existing.handle.agent_id,
                    )
        if len(tasks) >= self.limit:
            return Spawned(status="limit-reached")
        handle = TaskHandle(
            task_id=new_id("task"), agent_id=new_id("agent"), thread_id=thread_id, run_id=run_id
        )
        running = _Running(
            handle=handle,
            role=role,
            key=key,
            started_at=datetime.now(UTC),
            on_settled=on_settled,
        )
        tasks[handle.task_id] = running
        await self.events.append(
            thread_id,
            "agent-spawned",
            {
                "parentId": ORCHESTRATOR,
                "role": role,
                "tools": tools,
                "taskId": handle.task_id,
                "title": title,
            }
            | ({"kind": kind} if kind else {})
            | ({"goal": goal} if goal else {})
            | ({"targetResource": {"type": "workflow", "id": workflow_id}} if workflow_id else {}),
            run_id=run_id,
            agent_id=handle.agent_id,
        )
        running.task = asyncio.create_task(self._run(running, body))
        return Spawned(status="started", task_id=handle.task_id, agent_id=handle.agent_id)

    async def _run(self, running: _Running, body: TaskBody) -> None:
        handle = running.handle
        result: str | None = None
        error: str | None = None
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                result = await body(handle)
        except asyncio.CancelledError:
            raise  # cancel() already removed the task and said so
        except Exception as exc:
            if deadline.expired():
                error = (
                    f"stopped: no result within {self.timeout_s:g} s "
                    "(INSTANCE_AI_BACKGROUND_TASK_TIMEOUT_SECONDS)"
                )
            else:
                error = str(exc) or type(exc).__name__
            log.warning("background task failed", task_id=handle.task_id, error=error)
        running.settling = True
        payload = {"role": running.role, "result": result or "", "status": "completed"}
        if error is not None:
            payload |= {"error": error, "status": "error"}
        try:
            await self.events.append(
                handle.thread_id,
                "agent-completed",
                payload,
                run_id=handle.run_id,
                agent_id=handle.agent_id,
            )
        finally:
            # Only once its completion is recorded: a client that sees the task gone from the
            # thread's status finds the agent-completed event in the stream.
            self._forget(handle)
        outcome = (
            TaskOutcome(status="error", error=error)
            if error is not None
            else TaskOutcome(status="completed", result=result or "")
        )
        await self._settled(running, outcome)

    async def _settled(self, running: _Running, outcome: TaskOutcome) -> None:
        if running.on_settled is None:
            return
        try:
            await running.on_settled(running.handle, outcome)
        except Exception:
            log.exception(
                "a background task's completion hook failed", task_id=running.handle.task_id
            )

    def _forget(self, handle: TaskHandle) -> None:
        self._threads.get(handle.thread_id, {}).pop(handle.task_id, None)
        self._finished.add(handle.task_id)

    def correct(self, thread_id: str, task_id: str, correction: str) -> CorrectionResult:
        running = self._threads.get(thread_id, {}).get(task_id)
        if running is None:
            return "task-completed" if task_id in self._finished else "task-not-found"
        running.handle.corrections.put_nowait(correction)
        return "queued"

    async def cancel(
        self, thread_id: str, task_id: str, *, quietly: bool = False, settle: bool = True
    ) -> bool:
        """Stop a task; `quietly`: without an event or hook (its thread is being deleted);
        `settle` false: without the hook (shutdown: the task is interrupted, not ended)."""
        running = self._threads.get(thread_id, {}).get(task_id)
        if running is None or (running.settling and not quietly):
            return False
        self._forget(running.handle)
        if running.task is not None:
            running.task.cancel()
            await asyncio.gather(running.task, return_exceptions=True)
        if quietly:
            return True
        await self.events.append(
            thread_id,
            "agent-completed",
            {"role": running.role, "result": "", "status": "cancelled"},
            run_id=running.handle.run_id,
            agent_id=running.handle.agent_id,
        )
        if settle:
            await self._settled(running, TaskOutcome(status="cancelled"))
        return True

    async def cancel_thread(
        self, thread_id: str, *, quietly: bool = False, settle: bool = True
    ) -> int:
        ids = list(self._threads.get(thread_id, {}))
        return sum(
            [
                await self.cancel(thread_id, task_id, quietly=quietly, settle=settle)
                for task_id in ids
            ]
        )

    async def cancel_all(self) -> None:
        """Shutdown: every task stops, none is settled (they were interrupted)."""
        for thread_id in list(self._threads):
            await self.cancel_thread(thread_id, settle=False)
