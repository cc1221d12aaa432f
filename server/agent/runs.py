"""Driving a run: messages in, model turn, tool calls, results appended, until the model
stops, the step budget is spent or a call waits for a person; and the runs the service
starts itself (follow-ups), queued while the thread has an open run.

A run's whole resumable state is the thread's message history (persisted as it grows) plus
the tool calls of the current step (`RunState`, kept on the run row). So a suspended run
survives a restart and resumes on `Confirm`, and a run that was cut off mid-step can have its
open calls closed with an honest result.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from server.agent.attachments import copy_into_workspace, manifest
from server.agent.provider import ModelError
from server.agent.run_state import FollowUp, RunScope, RunState
from server.agent.services import AgentServices
from server.agent.titles import thread_title
from server.agent.tool_calls import AgentCalls, StillWaiting
from server.agent.turns import ModelTurns, call_of
from server.core.caller import Caller
from server.core.failures import describe
from server.core.ids import new_id
from server.errors import FailedPreconditionError
from server.runtime.attachments import Attachment
from server.runtime.events import ORCHESTRATOR
from server.runtime.hitl import Confirmation
from server.runtime.threads import RunInfo
from server.tools.spec import PLANNED_TASK_RUN

__all__ = ["PlannedRunEnded", "RunDriver"]

log = structlog.get_logger(__name__)

PLANNED_TASK_ID = re.compile(r'<planned-task-follow-up type="[a-z-]+" taskId="([^"]+)">')

# A run that executed a planned task ended: (its scope, the task, the plan's caller, the
# run's status and reason). The orchestration settles the task and goes on with the plan.
PlannedRunEnded = Callable[[RunScope, str, Caller, str, str | None], Awaitable[None]]


class RunDriver:
    """Each thread's open run, driven in a task of its own, and its queued follow-ups."""

    def __init__(self, services: AgentServices, turns: ModelTurns, calls: AgentCalls) -> None:
        self._services = services
        self._settings = services.settings
        self._turns = turns
        self._calls = calls
        self.drives: dict[str, asyncio.Task[None]] = {}
        self.follow_ups: dict[str, list[FollowUp]] = {}
        # Run id → (planned task id, caller) of the follow-up runs that execute planned tasks.
        self.planned_runs: dict[str, tuple[str, Caller]] = {}
        self._starting: set[asyncio.Future[None]] = set()
        self.closing = False
        self.on_planned_run_ended: PlannedRunEnded | None = None

    # -- starting and resuming ------------------------------------------------------------

    async def start_run(
        self,
        thread_id: str,
        text: str,
        *,
        kind: str,
        caller: Caller,
        message_id: str = "",
        attachments: Sequence[Attachment] = (),
    ) -> str:
        group = new_id("mg")
        services = self._services
        threads, conversation = services.threads, services.conversation
        first = kind == "chat" and await conversation.is_empty(thread_id)
        run_id = await threads.start_run(
            thread_id,
            message_id=message_id,
            kind=kind,
            message_group_id=group,
            caller=caller,
            message=text if kind == "chat" else None,
        )
        try:
            stored = await services.attachments.save(thread_id, run_id, list(attachments))
            listed = manifest(stored, in_workspace=self._settings.sandbox_provider != "none")
            content = [{"type": "text", "text": self._with_running_tasks(thread_id, text) + listed}]
            await conversation.append(thread_id, run_id, [{"role": "user", "content": content}])
        except BaseException:
            await threads.finish_run(thread_id, run_id, status="error", reason="store_failed")
            raise
        if first:
            title = thread_title(text)
            await threads.title_if_unset(thread_id, title)
            await services.events.append(
                thread_id, "thread-title-updated", {"title": title}, run_id=run_id
            )
        scope = RunScope(
            thread_id=thread_id,
            run_id=run_id,
            agent_id=ORCHESTRATOR,
            kind=kind,
            message_group_id=group,
            caller=caller,
            attachments=any(a.format is not None for a in stored),
        )
        sandbox_for = services.sandbox_for

        async def copy() -> None:
            await copy_into_workspace(sandbox_for, thread_id, stored)

        self._launch(scope, RunState(), answer=None, first=copy)
        return run_id

    def _with_running_tasks(self, thread_id: str, text: str) -> str:
        running = self._services.background.running(thread_id)
        if not running:
            return text
        lines = "\n".join(
            f"- {t.task_id} ({t.role}), started {t.started_at:%H:%M:%S}" for t in running
        )
        return f"<running-tasks>\n{lines}\n</running-tasks>\n\n{text}"

    async def resume(self, found: Confirmation, answer: dict[str, Any], *, status: str) -> None:
        """The suspended run of an answered card goes on, driven here."""
        services = self._services
        confirmation = await services.hitl.answer(
            found.thread_id, found.request_id, answer, status=status
        )
        run = await services.threads.run(confirmation.run_id)
        if run is None or run.status != "suspended":
            raise FailedPreconditionError(f"run {confirmation.run_id!r} is not waiting any more")
        await services.threads.save_state(run.id, run.state, status="active")
        # Suspended on another replica: this one now drives it, planned task and all.
        if run.id not in self.planned_runs and (task_id := await self.planned_task_of(run)):
            self.planned_runs[run.id] = (task_id, run.caller)
        scope = RunScope(
            thread_id=run.thread_id,
            run_id=run.id,
            agent_id=ORCHESTRATOR,
            kind=run.kind,
            message_group_id=run.message_group_id,
            caller=run.caller,
            attachments=await services.attachments.any_parseable(run.id),
        )
        self._launch(scope, RunState.load(run.state), answer=answer)

    async def planned_task_of(self, run: RunInfo) -> str | None:
        """The planned task a run executes: named in its briefing (the thread's last
        planned-task message, since a thread's runs take turns)."""
        if run.kind != PLANNED_TASK_RUN:
            return None
        for message in reversed(await self._services.conversation.load(run.thread_id)):
            for block in message["content"] if message["role"] == "user" else []:
                found = PLANNED_TASK_ID.search(str(block.get("text", "")))
                if found:
                    return found.group(1)
        return None

    # -- driving --------------------------------------------------------------------------

    def _launch(
        self,
        scope: RunScope,
        state: RunState,
        *,
        answer: dict[str, Any] | None,
        first: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Drive the run in a task of its own; `first` runs before anything else (the
        message's attachments reaching the workspace before the model can ask for them)."""
        task = asyncio.create_task(self._drive(scope, state, answer, first))
        self.drives[scope.thread_id] = task

        def done(_: asyncio.Task[None]) -> None:
            if self.drives.get(scope.thread_id) is task:
                del self.drives[scope.thread_id]

        task.add_done_callback(done)

    async def _drive(
        self,
        scope: RunScope,
        state: RunState,
        answer: dict[str, Any] | None,
        first: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        try:
            if first is not None:
                await first()
            if answer is not None:
                await self._calls.resume_call(scope, state, answer)
            if state.pending and await self._calls.run_step(scope, state):
                return  # waiting for a person again
            await self._steps(scope, state)
        except asyncio.CancelledError:
            raise  # the canceller closes the run
        except StillWaiting:
            return
        except ModelError as exc:
            await self._fail(scope, str(exc), status_code=exc.status_code)
        except Exception as exc:
            log.exception("agent run failed", run_id=scope.run_id)
            await self._fail(scope, describe(exc), status_code=None)

    async def _steps(self, scope: RunScope, state: RunState) -> None:
        """Model turn, tool calls, repeat: until the model stops, the budget is spent, a call
        waits for a person or the run was cancelled."""
        assert scope.run_id is not None
        while True:
            if state.steps >= self._settings.agent_max_steps:
                await self._finish(scope, "completed", "max_steps")
                return
            state.steps += 1
            messages, loaded = await self._turns.context(scope)
            turn = await self._turns.turn(scope, messages, loaded)
            if turn.content:
                await self._services.conversation.append(
                    scope.thread_id, scope.run_id, [{"role": "assistant", "content": turn.content}]
                )
            await self._turns.publish_text(scope, turn)
            if not turn.tool_uses:
                await self._finish(scope, "completed", None)
                return
            state.pending = [call_of(block, turn) for block in turn.tool_uses]
            state.results = {}
            if not await self._services.threads.save_state(scope.run_id, state.dump()):
                return  # cancelled meanwhile
            if await self._calls.run_step(scope, state):
                return

    async def _finish(self, scope: RunScope, status: str, reason: str | None) -> None:
        assert scope.run_id is not None
        services = self._services
        services.events.publish_live(
            scope.thread_id, "status", {"message": ""}, run_id=scope.run_id
        )
        await services.threads.save_state(scope.run_id, None)
        await services.threads.finish_run(
            scope.thread_id, scope.run_id, status=status, reason=reason
        )
        planned = self.planned_runs.pop(scope.run_id, None)
        if planned is not None and self.on_planned_run_ended is not None:
            task_id, caller = planned
            await self.on_planned_run_ended(scope, task_id, caller, status, reason)
        self._next_follow_up(scope.thread_id)

    async def _fail(self, scope: RunScope, message: str, *, status_code: int | None) -> None:
        assert scope.run_id is not None
        payload: dict[str, Any] = {"content": message}
        if status_code is not None:
            payload["statusCode"] = status_code
        if self._turns.provider is not None:
            payload["provider"] = self._turns.provider.name
        await self._services.events.append(
            scope.thread_id, "error", payload, run_id=scope.run_id, agent_id=scope.agent_id
        )
        run = await self._services.threads.run(scope.run_id)
        if run is not None:
            await self._calls.close_calls(run, f"Not run: the run failed ({message}).")
        await self._finish(scope, "error", message)

    # -- stopping -------------------------------------------------------------------------

    async def stop_thread(self, thread_id: str) -> None:
        """Stop the thread's drive and drop its queued follow-ups (nothing is written)."""
        drive = self.drives.get(thread_id)
        if drive is not None:
            drive.cancel()
            await asyncio.gather(drive, return_exceptions=True)
        self.follow_ups.pop(thread_id, None)

    async def stop_all(self) -> None:
        """Stop every drive here, writing nothing (whoever stops them closes the runs)."""
        drives = list(self.drives.values())
        for task in drives:
            task.cancel()
        await asyncio.gather(*drives, return_exceptions=True)

    # -- runs the service starts itself ---------------------------------------------------

    async def follow_up(
        self, thread_id: str, text: str, *, kind: str, caller: Caller, task_id: str | None = None
    ) -> None:
        """A run the service starts itself; queued while the thread has an open run."""
        if self.closing or self._turns.provider is None:
            return
        self.follow_ups.setdefault(thread_id, []).append(
            FollowUp(text=text, kind=kind, caller=caller, task_id=task_id)
        )
        status = await self._services.threads.status(thread_id)
        if status.active_run_id is None:
            self._next_follow_up(thread_id)

    def _next_follow_up(self, thread_id: str) -> None:
        queued = self.follow_ups.get(thread_id)
        if not queued or self.closing:
            return
        follow_up = queued.pop(0)

        async def start() -> None:
            try:
                run_id = await self.start_run(
                    thread_id, follow_up.text, kind=follow_up.kind, caller=follow_up.caller
                )
                if follow_up.task_id is not None:
                    self.planned_runs[run_id] = (follow_up.task_id, follow_up.caller)
            except FailedPreconditionError:  # a user's run got there first: wait for it
                self.follow_ups.setdefault(thread_id, []).insert(0, follow_up)

        task = asyncio.ensure_future(start())
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
