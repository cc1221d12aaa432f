"""The agent loop: messages in, model stream out, tool calls executed, results appended, until
the model stops, the step budget is spent or a tool waits for a person.

A run's whole resumable state is the thread's message history (persisted as it grows) plus
the tool calls of the current step (`RunState`, kept on the run row). So a suspended run
survives a restart and resumes on `Confirm`, and a run that was cut off mid-step can have its
open calls closed with an honest result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog

from server.agent.attachments import copy_into_workspace, manifest
from server.agent.distribution import for_background
from server.agent.prompt import background_prompt, orchestrator_prompt
from server.agent.provider import (
    ModelError,
    ModelProvider,
    ModelRequest,
    ModelTurn,
    StreamCallbacks,
)
from server.agent.run_state import FollowUp, Outcome, RunScope, RunState, Suspension
from server.agent.titles import thread_title
from server.core.caller import LOCAL, Caller
from server.core.ids import new_id
from server.errors import FailedPreconditionError, NotFoundError
from server.mcp.gateway import GROUP as FILESYSTEM_GROUP
from server.runtime.attachments import Attachment, Attachments
from server.runtime.background import BackgroundTasks, Settled, TaskHandle, TaskOutcome
from server.runtime.conversation import Conversation, estimate_tokens, repair, trim
from server.runtime.events import ORCHESTRATOR, EventLog
from server.runtime.hitl import DENIED_BY_TIMEOUT, Confirmation, Hitl, parse_resume
from server.runtime.plans import Plans
from server.runtime.replicas import Replicas
from server.runtime.threads import RunInfo, Threads
from server.settings import Settings
from server.tools.loading import CORE_TOOLS, TOOL_LOADERS, loaded_tools
from server.tools.registry import CallSite, ToolInputError, ToolRegistry, describe, dump
from server.tools.skills import SkillLibrary
from server.tools.spec import (
    PLANNED_TASK_ALLOWS,
    PLANNED_TASK_RUN,
    Orchestration,
    SandboxFor,
    Suspend,
    ToolSpec,
    blocked_message,
)

__all__ = [
    "INTERRUPTED",
    "NO_MODEL",
    "OFFLOAD_DIR",
    "ORCHESTRATION_GROUP",
    "ORCHESTRATOR",
    "Agent",
    "AgentServices",
]

log = structlog.get_logger(__name__)

ORCHESTRATION_GROUP = "orchestration"
# Planned tasks the orchestrator executes itself, as a follow-up run of the thread (the
# seed's executors); `delegate` tasks go to background agents.
ORCHESTRATOR_TASK_KINDS = ("build-workflow", "checkpoint")
PLANNED_TASK_ID = re.compile(r'<planned-task-follow-up type="[a-z-]+" taskId="([^"]+)">')
NO_MODEL = (
    "no model is configured: set INSTANCE_AI_MODEL (e.g. claude-sonnet-4-5) and "
    "INSTANCE_AI_ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY); everything else works without one"
)
OFFLOAD_DIR = ".tool-results"
INTERRUPTED = "the server stopped during this call"


@dataclass(frozen=True, kw_only=True)
class AgentServices:
    """What the agent works with: the thread's log, runs, history, cards, plans and
    background tasks, and its sandbox (for large results). Tools come through the registry."""

    settings: Settings
    events: EventLog
    threads: Threads
    hitl: Hitl
    conversation: Conversation
    attachments: Attachments
    plans: Plans
    background: BackgroundTasks
    sandbox_for: SandboxFor
    skills: SkillLibrary
    replicas: Replicas


class Agent(Orchestration):
    def __init__(
        self, services: AgentServices, registry: ToolRegistry, provider: ModelProvider | None
    ) -> None:
        self.services = services
        self.settings = services.settings
        self.registry = registry
        self.provider = provider
        self._drives: dict[str, asyncio.Task[None]] = {}
        self._follow_ups: dict[str, list[FollowUp]] = {}
        # Request id → the background agent waiting for that card's answer.
        self._background_asks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        # Run id → (planned task id, caller) of the follow-up runs that execute planned tasks.
        self._planned_runs: dict[str, tuple[str, Caller]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._starting: set[asyncio.Future[None]] = set()
        self._closing = False
        self._recovered = False
        self._taking_over = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        replicas = self.services.replicas
        replicas.handle("stop-thread", self._stop_thread_here)
        replicas.handle("answer-background", self._answer_background_asked)
        replicas.on_dead(self._take_over)
        replicas.on_declared_dead(self._drop_drives)
        await self.recover()
        if self.settings.confirmation_timeout_seconds > 0:
            self._sweeper = asyncio.create_task(self._sweep_forever())

    async def close(self) -> None:
        """Stop the sweeper and every driven run; runs end as interrupted (shutdown)."""
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        drives = dict(self._drives)
        for task in drives.values():
            task.cancel()
        await asyncio.gather(*drives.values(), return_exceptions=True)
        await self.services.background.cancel_all()
        for run in await self.services.threads.open_runs():
            # Only this replica's: the others' runs go on.
            if run.status == "active" and run.owner == self.services.replicas.id:
                await self._interrupt(run, reason="server_shutdown")
        if self.provider is not None:
            await self.provider.close()

    async def recover(self) -> None:
        """Runs that were active when their replica died are closed as interrupted;
        suspended runs stay suspended and resume on Confirm, on any replica (one executing a
        planned task still settles it then). See `_take_over` for the rest."""
        for run in await self.services.threads.open_runs():
            if run.status == "suspended" and (task_id := await self._planned_task_of(run)):
                self._planned_runs[run.id] = (task_id, run.caller)
        if self.services.replicas.is_leader:  # else the leader does, within a heartbeat
            await self._take_over()

    async def _take_over(self) -> None:
        """End what dead replicas left: their active runs (interrupted, `tool-interrupted`
        for cut-off calls). When this replica is the only one alive, also fail planned tasks
        nothing executes any more (their run or background agent ended with a process), so
        their plans replan instead of waiting forever, and close tool calls made outside a
        run that never ended; with others alive those may still be running there."""
        replicas = self.services.replicas
        async with self._taking_over:  # start-up and the heartbeat may overlap
            orphans = await self.services.threads.orphaned_runs(replicas.owned_by_live)
            for run in orphans:
                log.warning("ending a run its replica left", run_id=run.id, replica=run.owner)
                await self._interrupt(run, reason="crash_interrupted")
            if (orphans or not self._recovered) and await replicas.alive() == {replicas.id}:
                self._recovered = True
                await self._fail_stranded_tasks()

    async def _drop_drives(self) -> None:
        """This replica was taken for dead (its lease lapsed): the runs it drove were ended
        by another, so stop driving them without writing anything more."""
        drives = list(self._drives.values())
        for task in drives:
            task.cancel()
        await asyncio.gather(*drives, return_exceptions=True)

    def _executing_here(self) -> set[str]:
        """The planned tasks this replica executes: in runs (driven or suspended), queued as
        follow-ups, or in background agents."""
        executing = {task_id for task_id, _ in self._planned_runs.values()}
        for queued in self._follow_ups.values():
            executing |= {f.task_id for f in queued if f.task_id is not None}
        keys = self.services.background.keys()
        return executing | {k.removeprefix("planned:") for k in keys if k.startswith("planned:")}

    async def _fail_stranded_tasks(self) -> None:
        executing = self._executing_here()
        plans = self.services.plans
        for plan in await plans.active():
            stranded = [
                t["id"] for t in plan.tasks if t["status"] == "running" and t["id"] not in executing
            ]
            for task_id in stranded:
                await plans.update_task(
                    plan.thread_id,
                    task_id,
                    run_id=plan.plan_run_id,
                    status="failed",
                    error="the server stopped while this task ran",
                )
            if stranded:
                owner = await self.services.threads.run(plan.plan_run_id or "")
                caller = owner.caller if owner is not None else LOCAL
                await self.schedule_plan(plan.thread_id, plan.plan_run_id, caller)
        # Calls made outside a run (Tools.CallTool, background agents) end here too.
        for call in await self.services.events.unfinished_direct_tool_calls():
            await self.services.events.append(
                call.thread_id,
                "tool-interrupted",
                {"toolCallId": call.payload.get("toolCallId"), "error": INTERRUPTED},
                agent_id=call.agent_id,
            )

    async def _interrupt(self, run: RunInfo, *, reason: str) -> None:
        events = self.services.events
        for call_id in await events.unfinished_tool_calls(run.thread_id, run.id):
            await events.append(
                run.thread_id,
                "tool-interrupted",
                {"toolCallId": call_id, "error": INTERRUPTED},
                run_id=run.id,
            )
        await self._close_calls(run, "Interrupted: the server stopped before this call finished.")
        await self.services.hitl.close_run(run.id)
        await self.services.threads.finish_run(
            run.thread_id, run.id, status="interrupted", reason=reason
        )

    # -- entry points ---------------------------------------------------------------------

    def _require_provider(self) -> ModelProvider:
        if self.provider is None:
            raise FailedPreconditionError(NO_MODEL)
        return self.provider

    async def send_message(
        self,
        thread_id: str,
        text: str,
        message_id: str = "",
        *,
        caller: Caller = LOCAL,
        attachments: Sequence[Attachment] = (),
    ) -> str:
        self._require_provider()
        return await self._start_run(
            thread_id,
            text,
            kind="chat",
            message_id=message_id,
            caller=caller,
            attachments=attachments,
        )

    async def _start_run(
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
        threads = self.services.threads
        conversation = self.services.conversation
        first = kind == "chat" and await conversation.is_empty(thread_id)
        run_id = await threads.start_run(
            thread_id, message_id=message_id, kind=kind, message_group_id=group, caller=caller
        )
        try:
            stored = await self.services.attachments.save(thread_id, run_id, list(attachments))
            listed = manifest(stored, in_workspace=self.settings.sandbox_provider != "none")
            content = [{"type": "text", "text": self._with_running_tasks(thread_id, text) + listed}]
            await conversation.append(thread_id, run_id, [{"role": "user", "content": content}])
        except BaseException:
            await threads.finish_run(thread_id, run_id, status="error", reason="store_failed")
            raise
        if first:
            await self.services.events.append(
                thread_id, "thread-title-updated", {"title": thread_title(text)}, run_id=run_id
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
        sandbox_for = self.services.sandbox_for

        async def copy() -> None:
            await copy_into_workspace(sandbox_for, thread_id, stored)

        self._launch(scope, RunState(), answer=None, first=copy)
        return run_id

    def _with_running_tasks(self, thread_id: str, text: str) -> str:
        running = self.services.background.running(thread_id)
        if not running:
            return text
        lines = "\n".join(
            f"- {t.task_id} ({t.role}), started {t.started_at:%H:%M:%S}" for t in running
        )
        return f"<running-tasks>\n{lines}\n</running-tasks>\n\n{text}"

    async def confirm(
        self,
        thread_id: str,
        request_id: str,
        resume: dict[str, Any],
        *,
        caller: Caller = LOCAL,
    ) -> str:
        """Answer a card; only the user whose run asked may (others: as if it did not exist)."""
        answer = parse_resume(resume)
        found = await self.services.hitl.get(request_id)
        run = await self.services.threads.run(found.run_id)
        if found.thread_id != thread_id or run is None or run.caller.user_id != caller.user_id:
            raise NotFoundError(f"thread {thread_id!r} has no confirmation request {request_id!r}")
        if found.status != "pending":
            raise FailedPreconditionError(
                f"confirmation request {request_id!r} was already resolved ({found.status})"
            )
        if await self._answer_background_anywhere(found, answer, status="answered"):
            return found.run_id
        self._require_provider()
        await self._resume(found, answer, status="answered")
        return found.run_id

    async def _resume(self, found: Confirmation, answer: dict[str, Any], *, status: str) -> None:
        confirmation = await self.services.hitl.answer(
            found.thread_id, found.request_id, answer, status=status
        )
        run = await self.services.threads.run(confirmation.run_id)
        if run is None or run.status != "suspended":
            raise FailedPreconditionError(f"run {confirmation.run_id!r} is not waiting any more")
        await self.services.threads.save_state(run.id, run.state, status="active")
        # Suspended on another replica: this one now drives it, planned task and all.
        if run.id not in self._planned_runs and (task_id := await self._planned_task_of(run)):
            self._planned_runs[run.id] = (task_id, run.caller)
        scope = RunScope(
            thread_id=run.thread_id,
            run_id=run.id,
            agent_id=ORCHESTRATOR,
            kind=run.kind,
            message_group_id=run.message_group_id,
            caller=run.caller,
            attachments=await self.services.attachments.any_parseable(run.id),
        )
        self._launch(scope, RunState.load(run.state), answer=answer)

    async def forget_thread(self, thread_id: str) -> None:
        """Stop everything running for a thread that is being deleted, on every replica
        (nothing is written: the thread's rows go with it)."""
        await self.services.replicas.ask("stop-thread", {"thread": thread_id, "forget": True})

    async def cancel_run(self, thread_id: str) -> str | None:
        """Cancel the thread's open run (idempotent): the model stream and running tools are
        aborted, background tasks stopped, open calls closed, `run-finish{cancelled}`."""
        status = await self.services.threads.status(thread_id)
        # The run's replica (and any running its background tasks) stops them first.
        await self.services.replicas.ask("stop-thread", {"thread": thread_id, "forget": False})
        plan = await self.services.plans.get(thread_id)
        if plan is not None and plan.status in ("active", "awaiting_approval"):
            await self.services.plans.set_status(
                thread_id, "cancelled", run_id=status.active_run_id
            )
        if status.active_run_id is None:
            return None
        run = await self.services.threads.run(status.active_run_id)
        if run is None:
            return None
        await self._close_calls(run, "Cancelled by the user.")
        await self.services.hitl.close_run(run.id)
        finished = await self.services.threads.finish_run(
            thread_id, run.id, status="cancelled", reason="user_cancelled"
        )
        return run.id if finished else None

    async def _stop_thread_here(self, args: dict[str, Any]) -> None:
        """Stop what this replica runs for a thread: its drive, queued follow-ups and
        background tasks — quietly when the thread is being forgotten (deleted), else
        unsettled one by one (the canceller cancels the plan as a whole)."""
        thread_id = args["thread"]
        drive = self._drives.get(thread_id)
        if drive is not None:
            drive.cancel()
            await asyncio.gather(drive, return_exceptions=True)
        self._follow_ups.pop(thread_id, None)
        background = self.services.background
        if args["forget"]:
            await background.cancel_thread(thread_id, quietly=True)
        else:
            await background.cancel_thread(thread_id, settle=False)

    # -- driving a run --------------------------------------------------------------------

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
        self._drives[scope.thread_id] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._drives.get(scope.thread_id) is task:
                del self._drives[scope.thread_id]

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
                await self._resume_call(scope, state, answer)
            if state.pending and await self._run_calls(scope, state):
                return  # waiting for a person again
            await self._steps(scope, state)
        except asyncio.CancelledError:
            raise  # the canceller closes the run
        except _StillWaiting:
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
            if state.steps >= self.settings.agent_max_steps:
                await self._finish(scope, "completed", "max_steps")
                return
            state.steps += 1
            messages, loaded = await self._context(scope)
            turn = await self._model_turn(scope, messages, loaded)
            if turn.content:
                await self.services.conversation.append(
                    scope.thread_id, scope.run_id, [{"role": "assistant", "content": turn.content}]
                )
            await self._publish_text(scope, turn)
            if not turn.tool_uses:
                await self._finish(scope, "completed", None)
                return
            state.pending = [_call_of(block, turn) for block in turn.tool_uses]
            state.results = {}
            if not await self.services.threads.save_state(scope.run_id, state.dump()):
                return  # cancelled meanwhile
            if await self._run_calls(scope, state):
                return

    async def _finish(self, scope: RunScope, status: str, reason: str | None) -> None:
        assert scope.run_id is not None
        self.services.events.publish_live(
            scope.thread_id, "status", {"message": ""}, run_id=scope.run_id
        )
        await self.services.threads.save_state(scope.run_id, None)
        await self.services.threads.finish_run(
            scope.thread_id, scope.run_id, status=status, reason=reason
        )
        planned = self._planned_runs.pop(scope.run_id, None)
        if planned is not None:
            await self._planned_run_ended(scope, planned, status, reason)
        self._next_follow_up(scope.thread_id)

    async def _planned_run_ended(
        self, scope: RunScope, planned: tuple[str, Caller], status: str, reason: str | None
    ) -> None:
        """A run that executed a planned task settles it, and the plan goes on."""
        assert scope.run_id is not None
        task_id, caller = planned
        changes: dict[str, Any]
        if status == "completed":
            changes = {"status": "succeeded", "result": await self._last_text(scope.thread_id)}
        elif status == "cancelled":
            changes = {"status": "cancelled", "error": "Cancelled by the user"}
        else:
            changes = {"status": "failed", "error": reason or status}
        await self.services.plans.update_task(
            scope.thread_id, task_id, run_id=scope.run_id, **changes
        )
        if not self._closing:
            await self.schedule_plan(scope.thread_id, scope.run_id, caller)

    async def _planned_task_of(self, run: RunInfo) -> str | None:
        """The planned task a run executes: named in its briefing (the thread's last
        planned-task message, since a thread's runs take turns)."""
        if run.kind != PLANNED_TASK_RUN:
            return None
        for message in reversed(await self.services.conversation.load(run.thread_id)):
            for block in message["content"] if message["role"] == "user" else []:
                found = PLANNED_TASK_ID.search(str(block.get("text", "")))
                if found:
                    return found.group(1)
        return None

    async def _last_text(self, thread_id: str) -> str:
        """The last thing the assistant said in the thread (a planned task's result)."""
        for message in reversed(await self.services.conversation.load(thread_id)):
            if message["role"] == "assistant":
                texts = [b["text"] for b in message["content"] if b.get("type") == "text"]
                if texts:
                    return "\n".join(texts)[:2000]
        return ""

    async def _fail(self, scope: RunScope, message: str, *, status_code: int | None) -> None:
        assert scope.run_id is not None
        payload: dict[str, Any] = {"content": message}
        if status_code is not None:
            payload["statusCode"] = status_code
        if self.provider is not None:
            payload["provider"] = self.provider.name
        await self.services.events.append(
            scope.thread_id, "error", payload, run_id=scope.run_id, agent_id=scope.agent_id
        )
        run = await self.services.threads.run(scope.run_id)
        if run is not None:
            await self._close_calls(run, f"Not run: the run failed ({message}).")
        await self._finish(scope, "error", message)

    async def _context(self, scope: RunScope) -> tuple[list[dict[str, Any]], set[str] | None]:
        """The history the model sees (trimmed to the budget, repaired) and the tools the
        thread loaded, from one read of the thread's messages."""
        full = await self.services.conversation.load(scope.thread_id)
        messages = repair(trim(full, self.settings.agent_history_token_budget))
        return messages, loaded_tools(full) if self._loads_tools(scope) else None

    # -- the model ------------------------------------------------------------------------

    def _tools_for(self, scope: RunScope, loaded: Collection[str] | None) -> list[dict[str, Any]]:
        return [
            {"name": spec.name, "description": spec.description, "input_schema": schema}
            for spec, schema in self.registry.listed(scope.caller.user_id)
            if self._offered(
                spec, background=scope.background, loaded=loaded, attachments=scope.attachments
            )
        ]

    def _offered(
        self,
        spec: ToolSpec[Any],
        *,
        background: bool,
        loaded: Collection[str] | None = None,
        attachments: bool = False,
    ) -> bool:
        """Whether a run's model is offered the tool: registered and expressible; for a
        background agent, one of its kind's (`distribution`); for the orchestrator, a core
        tool or one the thread loaded (`loaded` None: whether it could be loaded). The
        user's filesystem gateway's tools are offered as soon as it connects; parse-file only
        when the run's message carries a parseable attachment."""
        if not (self.registry.registered(spec) and self.registry.schema_of(spec) is not None):
            return False
        if spec.only_with_attachments and not attachments:
            return False
        if background:
            return for_background(spec)
        if not self.settings.agent_deferred_tools:
            return spec.name not in TOOL_LOADERS
        return (
            loaded is None
            or spec.name in CORE_TOOLS
            or spec.group == FILESYSTEM_GROUP
            or spec.name in loaded
        )

    async def _loaded(self, scope: RunScope) -> set[str] | None:
        """The tools the orchestrator loaded in this thread (None for a background agent,
        which is offered its whole set)."""
        if not self._loads_tools(scope):
            return None
        return loaded_tools(await self.services.conversation.load(scope.thread_id))

    def _loads_tools(self, scope: RunScope) -> bool:
        """Whether the run is offered the core plus what its thread loaded."""
        return not scope.background and self.settings.agent_deferred_tools

    def _background_tools(self) -> list[str]:
        """The tool names a background agent receives (its agent-spawned event says them)."""
        return [
            spec.name for spec, _ in self.registry.listed() if self._offered(spec, background=True)
        ]

    async def _model_turn(
        self,
        scope: RunScope,
        messages: list[dict[str, Any]],
        loaded: Collection[str] | None = None,
    ) -> ModelTurn:
        """One assistant turn, streamed live; a stream that dies is retried from scratch
        (its live deltas are superseded by the durable text-block of the attempt that
        succeeds, keyed by responseId)."""
        provider = self._require_provider()
        skills = self.services.skills
        system = (
            background_prompt(skills, scope.kind)
            if scope.background
            else orchestrator_prompt(skills, self.settings.browser)
        )
        request = ModelRequest(
            system=system,
            messages=messages,
            tools=self._tools_for(scope, loaded),
            max_tokens=self.settings.model_max_tokens,
            thinking_budget=self.settings.model_thinking_budget_tokens,
        )
        events = self.services.events
        where = {"run_id": scope.run_id, "agent_id": scope.agent_id}
        response_id = ""

        def on_start(message_id: str) -> None:
            nonlocal response_id
            response_id = message_id

        def on_text(text: str) -> None:
            events.publish_live(
                scope.thread_id, "text-delta", {"text": text, "responseId": response_id}, **where
            )

        def on_reasoning(text: str) -> None:
            events.publish_live(scope.thread_id, "reasoning-delta", {"text": text}, **where)

        def on_tool_start(call_id: str, name: str) -> None:
            events.publish_live(
                scope.thread_id,
                "tool-input-start",
                {"toolCallId": call_id, "toolName": name},
                **where,
            )

        callbacks = StreamCallbacks(
            on_start=on_start,
            on_text=on_text,
            on_tool_start=on_tool_start,
            on_reasoning=on_reasoning,
        )
        events.publish_live(scope.thread_id, "status", {"message": "Thinking…"}, **where)
        attempts = self.settings.model_max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return await provider.complete(request, callbacks)
            except ModelError as exc:
                if not exc.retryable or attempt == attempts:
                    raise
                log.warning("model turn failed; retrying", attempt=attempt, error=str(exc))
                await asyncio.sleep(min(0.25 * 2**attempt, 8.0))
        raise AssertionError("unreachable")

    async def _publish_text(self, scope: RunScope, turn: ModelTurn) -> None:
        """The turn's durable blocks: what the model thought (reasoning-block), then said."""
        if turn.reasoning:
            await self.services.events.append(
                scope.thread_id,
                "reasoning-block",
                {"text": turn.reasoning},
                run_id=scope.run_id,
                agent_id=scope.agent_id,
            )
        if turn.text:
            await self.services.events.append(
                scope.thread_id,
                "text-block",
                {"text": turn.text, "responseId": turn.message_id},
                run_id=scope.run_id,
                agent_id=scope.agent_id,
            )

    # -- tool calls -----------------------------------------------------------------------

    async def _run_calls(self, scope: RunScope, state: RunState) -> bool:
        """Run the step's open calls: those that cannot wait for a person concurrently, the
        rest one by one. True when one suspended the run (its state is saved)."""
        assert scope.run_id is not None
        calls = state.open_calls()
        may_wait = [c for c in calls if await self._may_wait(scope, c)]
        direct = [c for c in calls if c not in may_wait]
        outcomes = await asyncio.gather(*(self._call(scope, c) for c in direct))
        for call, outcome in zip(direct, outcomes, strict=True):
            assert not isinstance(outcome, Suspension)
            state.results[call["id"]] = outcome
        for call in may_wait:
            outcome = await self._call(scope, call)
            if isinstance(outcome, Suspension):
                await self._suspend(scope, state, call, outcome)
                return True
            state.results[call["id"]] = outcome
        await self._append_results(scope, state)
        return False

    async def _may_wait(self, scope: RunScope, call: dict[str, Any]) -> bool:
        spec = self._spec(scope, call["name"])
        if spec is None or scope.background:
            return False
        return await self.registry.may_wait(scope.thread_id, spec)

    def _spec(self, scope: RunScope, name: str) -> ToolSpec[Any] | None:
        try:
            return self.registry.get(name, scope.caller.user_id)
        except NotFoundError:
            return None

    async def _call(
        self,
        scope: RunScope,
        call: dict[str, Any],
        *,
        answer: dict[str, Any] | None = None,
        gate: str | None = None,
    ) -> Outcome:
        """One tool call, to a tool_result block's content, or a suspension. A resumed call
        (`gate` set) was announced before it waited."""
        announce = gate is None
        site = CallSite(
            thread_id=scope.thread_id,
            call_id=call["id"],
            run_id=scope.run_id,
            agent_id=scope.agent_id,
            message_group_id=scope.message_group_id,
            run_kind=scope.kind,
            resume=answer if gate == "tool" else None,
            orchestration=self,
            caller=scope.caller,
        )
        checked = await self._check(site, scope, call, announce)
        if isinstance(checked, dict):
            return checked
        spec, args = checked
        if gate != "approval":
            refused = await self._gate(site, scope, spec, call, args, announce)
            if refused is not None:
                return refused
        elif answer is not None:
            if not answer.get("approved"):
                return await self._refuse(site, call, False, _denied(spec.name, answer))
            if answer.get("scope") == "session":
                await self.registry.allow_for_thread(scope.thread_id, spec, args)
        self.services.events.publish_live(
            scope.thread_id,
            "status",
            {"message": f"Running {spec.name}…"},
            run_id=scope.run_id,
            agent_id=scope.agent_id,
        )
        try:
            result = await self.registry.execute(site, spec, args, call["input"], announce=announce)
        except Suspend as wait:
            if not scope.background:
                return Suspension(gate="tool", question=wait.question)
            answer = await self._ask_from_background(scope, call, wait.question)
            return await self._call(scope, call, answer=answer, gate="tool")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return {"content": describe(exc), "is_error": True}
        return {"content": await self._content(scope, call["id"], dump(result)), "is_error": False}

    async def _check(
        self, site: CallSite, scope: RunScope, call: dict[str, Any], announce: bool
    ) -> tuple[ToolSpec[Any], Any] | dict[str, Any]:
        """The tool and its validated arguments, or a correctable error for the model."""
        spec = self._spec(scope, call["name"])
        background, attachments = scope.background, scope.attachments
        if spec is None or not self._offered(spec, background=background, attachments=attachments):
            error = f"Unknown tool {call['name']!r}; use one of your tools."
            return await self._refuse(site, call, announce, error)
        # Only a tool outside the core needs the thread's loads (read from its history).
        loaded = None if spec.name in CORE_TOOLS else await self._loaded(scope)
        if not self._offered(spec, background=background, loaded=loaded, attachments=attachments):
            error = (
                f"{spec.name} is not loaded: call load_tool with toolName {spec.name!r}, then "
                "call it from your next turn on."
            )
            return await self._refuse(site, call, announce, error)
        if call.get("malformed"):
            error = f"{call['malformed']}. Call {spec.name} again with a JSON object."
            return await self._refuse(site, call, announce, error)
        try:
            return spec, self.registry.parse(spec, call["input"])
        except ToolInputError as exc:
            return await self._refuse(site, call, announce, str(exc))

    async def _gate(
        self,
        site: CallSite,
        scope: RunScope,
        spec: ToolSpec[Any],
        call: dict[str, Any],
        args: Any,
        announce: bool,
    ) -> Outcome | None:
        """The registry's permission rule for this run: None to go ahead, else a refusal or
        a wait for the person's approval (which a background agent cannot ask for)."""
        decision = await self.registry.decide(scope.thread_id, spec, args)
        if decision == "allow":
            return None
        if (
            decision == "ask"
            and scope.kind == PLANNED_TASK_RUN
            and spec.hitl_action in PLANNED_TASK_ALLOWS
        ):
            return None
        if decision == "blocked":
            return await self._refuse(site, call, announce, blocked_message(spec))
        if scope.background:
            return await self._refuse(
                site,
                call,
                announce,
                f"{spec.name} needs the user's approval, which a background task cannot ask "
                "for; report back that it is needed.",
            )
        await self.registry.announce(site, spec.name, call["input"])
        question = {"inputType": "approval", "severity": spec.severity}
        return Suspension(gate="approval", question=question | {"message": f"Allow {spec.name}?"})

    async def _refuse(
        self, site: CallSite, call: dict[str, Any], announce: bool, error: str
    ) -> dict[str, Any]:
        """A correctable error for the model, recorded like any failed call."""
        await self.registry.refuse(site, call["name"], call["input"], error, announce=announce)
        return {"content": error, "is_error": True}

    async def _content(self, scope: RunScope, call_id: str, result: dict[str, Any]) -> str:
        """The result as the model reads it; too large → stored in the workspace, pointed to."""
        text = json.dumps(result, ensure_ascii=False)
        if estimate_tokens(text) <= self.settings.agent_tool_result_max_tokens:
            return text
        path = f"{OFFLOAD_DIR}/{call_id}.json"
        try:
            manager = await self.services.sandbox_for(scope.thread_id)
            await manager.write_file(scope.thread_id, path, text.encode())
        except Exception as exc:  # no workspace: cut instead
            keep = self.settings.agent_tool_result_max_tokens * 4
            log.warning("could not store a large tool result", error=str(exc))
            return text[:keep] + f"… [cut: {len(text) - keep} more characters]"
        return json.dumps(
            {
                "_offloaded": True,
                "path": path,
                "chars": len(text),
                "requiredAction": {
                    "toolName": "workspace_read_tool_result",
                    "input": {"path": path, "view": "describe"},
                },
            }
        )

    async def _suspend(
        self, scope: RunScope, state: RunState, call: dict[str, Any], wait: Suspension
    ) -> None:
        assert scope.run_id is not None
        confirmation = await self._card(scope, call, wait.question)
        state.suspended = {
            "toolCallId": call["id"],
            "requestId": confirmation.request_id,
            "gate": wait.gate,
        }
        # Waiting is recorded before the card is shown, so an answer always finds the run
        # suspended; a crash in between leaves an active run, which recovery interrupts.
        await self.services.threads.save_state(scope.run_id, state.dump(), status="suspended")
        await self.services.hitl.publish(confirmation, agent_id=scope.agent_id)

    async def _card(
        self, scope: RunScope, call: dict[str, Any], question: dict[str, Any]
    ) -> Confirmation:
        """The confirmation row of a call's question (published by the caller)."""
        assert scope.run_id is not None
        return await self.services.hitl.request(
            thread_id=scope.thread_id,
            run_id=scope.run_id,
            agent_id=scope.agent_id,
            tool_call_id=call["id"],
            tool_name=call["name"],
            args=call["input"],
            question=question,
        )

    async def _ask_from_background(
        self, scope: RunScope, call: dict[str, Any], question: dict[str, Any]
    ) -> dict[str, Any]:
        """A background agent's question (ask-user, a set-up card): shown like any card, and
        the agent waits for the answer in this process (background agents end with it)."""
        confirmation = await self._card(scope, call, question)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._background_asks[confirmation.request_id] = waiter
        try:
            await self.services.hitl.publish(confirmation, agent_id=scope.agent_id)
            return await waiter
        except asyncio.CancelledError:
            # The agent is gone (cancelled, shut down): its card is no question any more.
            cancelled = self.services.hitl.answer(
                scope.thread_id, confirmation.request_id, {}, status="cancelled"
            )
            with contextlib.suppress(Exception):
                await asyncio.shield(cancelled)
            raise
        finally:
            self._background_asks.pop(confirmation.request_id, None)

    async def _answer_background_anywhere(
        self, found: Confirmation, answer: dict[str, Any], *, status: str
    ) -> bool:
        """Answer a card a background agent waits on, on whichever replica runs the agent
        (False: no agent waits on it)."""
        args = {"request": found.request_id, "answer": answer, "status": status}
        return any(await self.services.replicas.ask("answer-background", args))

    async def _answer_background_asked(self, args: dict[str, Any]) -> bool:
        waiter = self._background_asks.get(args["request"])
        if waiter is None or waiter.done():
            return False
        found = await self.services.hitl.get(args["request"])
        return await self._answer_background(found, args["answer"], status=args["status"])

    async def _answer_background(
        self, found: Confirmation, answer: dict[str, Any], *, status: str
    ) -> bool:
        """Answer a card a background agent waits on (False: no agent waits on it)."""
        waiter = self._background_asks.get(found.request_id)
        if waiter is None or waiter.done():
            return False
        await self.services.hitl.answer(found.thread_id, found.request_id, answer, status=status)
        waiter.set_result(answer)
        return True

    async def _resume_call(self, scope: RunScope, state: RunState, answer: dict[str, Any]) -> None:
        waiting = state.suspended
        state.suspended = None
        if waiting is None:
            return
        call = next(c for c in state.pending if c["id"] == waiting["toolCallId"])
        outcome = await self._call(scope, call, answer=answer, gate=waiting["gate"])
        if isinstance(outcome, Suspension):  # asked again (e.g. a revised question)
            await self._suspend(scope, state, call, outcome)
            raise _StillWaiting
        state.results[call["id"]] = outcome

    async def _append_results(self, scope: RunScope, state: RunState) -> None:
        assert scope.run_id is not None
        blocks = [
            {"type": "tool_result", "tool_use_id": c["id"], **state.results[c["id"]]}
            for c in state.pending
        ]
        await self.services.conversation.append(
            scope.thread_id, scope.run_id, [{"role": "user", "content": blocks}]
        )
        state.pending, state.results = [], {}
        await self.services.threads.save_state(scope.run_id, state.dump())

    async def _close_calls(self, run: RunInfo, error: str) -> None:
        """Give every open call of the run's step a result, so the history stays valid."""
        state = RunState.load(run.state)
        if not state.pending:
            return
        for call in state.open_calls():
            state.results[call["id"]] = {"content": error, "is_error": True}
        scope = RunScope(
            thread_id=run.thread_id, run_id=run.id, agent_id=ORCHESTRATOR, kind=run.kind
        )
        await self._append_results(scope, state)

    # -- confirmations that nobody answers -------------------------------------------------

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.confirmation_sweep_interval_seconds)
            if not self.services.replicas.is_leader:
                continue  # one replica sweeps for all
            try:
                await self.sweep_confirmations()
            except Exception:
                log.exception("confirmation sweep failed")

    async def sweep_confirmations(self) -> int:
        """Deny confirmations older than the timeout; their runs go on with the denial."""
        age = timedelta(seconds=self.settings.confirmation_timeout_seconds)
        expired = await self.services.hitl.older_than(age)
        for found in expired:
            try:
                if await self._answer_background_anywhere(
                    found, parse_resume(DENIED_BY_TIMEOUT), status="expired"
                ):
                    continue
                if self.provider is None:
                    await self.services.hitl.answer(
                        found.thread_id, found.request_id, DENIED_BY_TIMEOUT, status="expired"
                    )
                    await self.services.threads.finish_run(
                        found.thread_id,
                        found.run_id,
                        status="cancelled",
                        reason="confirmation_timeout",
                    )
                else:
                    await self._resume(found, parse_resume(DENIED_BY_TIMEOUT), status="expired")
            except FailedPreconditionError:
                continue  # answered meanwhile
        return len(expired)

    # -- background agents, plans and follow-ups (the Orchestration port) ------------------

    async def delegate(
        self,
        thread_id: str,
        run_id: str | None,
        *,
        role: str,
        briefing: str,
        key: str | None,
        caller: Caller,
    ) -> dict[str, Any]:
        spawned = await self.services.background.spawn(
            thread_id,
            role=role,
            body=self._background_body(role, briefing, caller),
            run_id=run_id,
            tools=self._background_tools(),
            title=briefing[:80],
            key=key,
        )
        return {"status": spawned.status, "taskId": spawned.task_id, "agentId": spawned.agent_id}

    def _background_body(
        self, role: str, briefing: str, caller: Caller
    ) -> Callable[[TaskHandle], Awaitable[str]]:
        async def body(handle: TaskHandle) -> str:
            return await self._background_run(handle, role, briefing, caller)

        return body

    async def _background_run(
        self, handle: TaskHandle, role: str, briefing: str, caller: Caller
    ) -> str:
        """A detached agent: its own message list (not the thread's history), domain tools
        only, no questions to the person; corrections join before each model turn."""
        scope = RunScope(
            thread_id=handle.thread_id,
            run_id=handle.run_id,
            agent_id=handle.agent_id,
            kind="background",
            caller=caller,
        )
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": briefing}]}
        ]
        text = ""
        for _ in range(self.settings.agent_max_steps):
            corrections = handle.drain_corrections()
            if corrections:
                messages[-1]["content"] = [
                    *messages[-1]["content"],
                    *({"type": "text", "text": f"Correction: {c}"} for c in corrections),
                ]
            turn = await self._model_turn(scope, messages)
            await self._publish_text(scope, turn)
            text = turn.text or text
            if not turn.tool_uses:
                return text
            messages.append({"role": "assistant", "content": turn.content})
            calls = [_call_of(block, turn) for block in turn.tool_uses]
            outcomes = await asyncio.gather(*(self._call(scope, c) for c in calls))
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": c["id"], **o}
                        for c, o in zip(calls, outcomes, strict=True)
                        if not isinstance(o, Suspension)
                    ],
                }
            )
        return text or "stopped: step budget spent"

    async def schedule_plan(self, thread_id: str, run_id: str | None, caller: Caller) -> int:
        """Start the plan's ready tasks as background agents; when the plan settles, start
        the follow-up run (replan after a failure, synthesize when all succeeded)."""
        background = self.services.background
        slots = background.limit - len(background.running(thread_id))
        tick = await self.services.plans.tick(thread_id, available_slots=slots)
        if tick.action == "replan":
            failed = "; ".join(
                f"{t['id']} ({t['title']}): {t.get('error', 'failed')}" for t in tick.tasks
            )
            await self.follow_up(
                thread_id,
                f'<planned-task-follow-up type="replan">Planned tasks failed: {failed}. '
                "Revise the remaining work with create-tasks (planningContext.source "
                '"replan") or explain to the user.</planned-task-follow-up>',
                kind="replan",
                caller=caller,
            )
            return 0
        if tick.action == "synthesize":
            results = "\n".join(f"- {t['title']}: {t.get('result', '')}" for t in tick.tasks)
            await self.follow_up(
                thread_id,
                f'<planned-task-follow-up type="synthesize">Every planned task finished:\n'
                f"{results}\nSummarise the outcome for the user.</planned-task-follow-up>",
                kind="follow-up",
                caller=caller,
            )
            return 0
        started = 0
        for task in tick.tasks:
            await self.services.plans.update_task(
                thread_id, task["id"], run_id=run_id, status="running"
            )
            if task["kind"] in ORCHESTRATOR_TASK_KINDS:
                await self.follow_up(
                    thread_id,
                    _planned_task_text(task),
                    kind=PLANNED_TASK_RUN,
                    caller=caller,
                    task_id=task["id"],
                )
                started += 1
                continue
            spawned = await background.spawn(
                thread_id,
                role=task["kind"],
                body=self._background_body(task["kind"], task["spec"], caller),
                run_id=run_id,
                tools=self._background_tools(),
                title=task["title"],
                key=f"planned:{task['id']}",
                on_settled=self._planned_task_settled(task["id"], caller),
            )
            if spawned.status == "started":
                started += 1
            else:
                await self.services.plans.update_task(
                    thread_id, task["id"], run_id=run_id, status="planned"
                )
        return started

    def _planned_task_settled(self, task_id: str, caller: Caller) -> Settled:
        async def settled(handle: TaskHandle, outcome: TaskOutcome) -> None:
            changes: dict[str, Any]
            if outcome.status == "completed":
                changes = {"status": "succeeded", "result": outcome.result}
            elif outcome.status == "error":
                changes = {"status": "failed", "error": outcome.error}
            else:
                changes = {"status": "cancelled", "error": "Cancelled by the user"}
            await self.services.plans.update_task(
                handle.thread_id, task_id, run_id=handle.run_id, **changes
            )
            if not self._closing:
                await self.schedule_plan(handle.thread_id, handle.run_id, caller)

        return settled

    async def follow_up(
        self, thread_id: str, text: str, *, kind: str, caller: Caller, task_id: str | None = None
    ) -> None:
        """A run the service starts itself; queued while the thread has an open run."""
        if self._closing or self.provider is None:
            return
        self._follow_ups.setdefault(thread_id, []).append(
            FollowUp(text=text, kind=kind, caller=caller, task_id=task_id)
        )
        status = await self.services.threads.status(thread_id)
        if status.active_run_id is None:
            self._next_follow_up(thread_id)

    def _next_follow_up(self, thread_id: str) -> None:
        queued = self._follow_ups.get(thread_id)
        if not queued or self._closing:
            return
        follow_up = queued.pop(0)

        async def start() -> None:
            try:
                run_id = await self._start_run(
                    thread_id, follow_up.text, kind=follow_up.kind, caller=follow_up.caller
                )
                if follow_up.task_id is not None:
                    self._planned_runs[run_id] = (follow_up.task_id, follow_up.caller)
            except FailedPreconditionError:  # a user's run got there first: wait for it
                self._follow_ups.setdefault(thread_id, []).insert(0, follow_up)

        task = asyncio.ensure_future(start())
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)


class _StillWaiting(Exception):
    """A resumed call suspended again; the run stays suspended."""


def _call_of(block: dict[str, Any], turn: ModelTurn) -> dict[str, Any]:
    call = {"id": block["id"], "name": block["name"], "input": block.get("input") or {}}
    if block["id"] in turn.malformed:
        call["malformed"] = turn.malformed[block["id"]]
    return call


def _denied(tool: str, answer: dict[str, Any]) -> str:
    feedback = answer.get("userInput")
    text = f"The user denied {tool}; do not retry it in this turn."
    return f"{text} They said: {feedback}" if feedback else text


def _planned_task_text(task: dict[str, Any]) -> str:
    """The message of the follow-up run that executes a planned task."""
    kind, lines = task["kind"], [f"Task: {task['title']}", task["spec"]]
    if task.get("workflowId"):
        lines.append(f"Work on the existing workflow {task['workflowId']}.")
    if kind == "build-workflow":
        supporting = (
            " It is a supporting sub-workflow: saving it finishes it."
            if task.get("isSupportingWorkflow")
            else ""
        )
        lines.append(
            "Load the workflow-builder skill, then write the source, build it with "
            "build-workflow and follow the post-build flow (verify, report the verdict)."
            f"{supporting} End with a short report: it is this task's result."
        )
    else:
        lines.append(
            "Check this against what the earlier tasks built (their work items and "
            "verification records; run or verify again only if they do not settle it). End "
            "with a short report of what you found: it is this task's result."
        )
    body = "\n".join(lines)
    return (
        f'<planned-task-follow-up type="{kind}" taskId="{task["id"]}">\n{body}\n'
        "</planned-task-follow-up>"
    )
