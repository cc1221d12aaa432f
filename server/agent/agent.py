"""The agent's entry points (a message, an answer to a card, a cancel, a thread forgotten)
over its rooms, each in a module of its own:

    turns.py          the model turn: what the model is shown and offered, one streamed turn
    tool_calls.py     a step's calls through the one tool-call pipeline, cards, results
    runs.py           driving a run step by step; the follow-up runs the service starts
    orchestration.py  background agents and plans (the handle orchestration tools get)
    confirmations.py  cards nobody answers, denied after the timeout
    lifecycle.py      start-up, take-over from dead replicas, shutdown
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from server.agent.confirmations import ConfirmationSweep
from server.agent.lifecycle import Lifecycle
from server.agent.orchestration import Orchestrator
from server.agent.provider import ModelProvider
from server.agent.runs import RunDriver
from server.agent.services import AgentServices
from server.agent.tool_calls import AgentCalls
from server.agent.turns import ModelTurns
from server.core.caller import LOCAL, Caller
from server.errors import FailedPreconditionError, NotFoundError
from server.runtime.attachments import Attachment
from server.runtime.hitl import parse_resume
from server.tools.calls import ToolCalls

__all__ = ["Agent"]


class Agent:
    def __init__(
        self, services: AgentServices, calls: ToolCalls, provider: ModelProvider | None
    ) -> None:
        self._services = services
        self._turns = ModelTurns(services, calls.registry, provider)
        self._calls = AgentCalls(services, calls, self._turns)
        self._runs = RunDriver(services, self._turns, self._calls)
        self._orchestrator = Orchestrator(services, self._turns, self._calls, self._runs)
        self._calls.orchestration = self._orchestrator
        self._runs.on_planned_run_ended = self._orchestrator.planned_run_ended
        self._sweep = ConfirmationSweep(
            services, self._calls, self._runs, has_model=provider is not None
        )
        self._lifecycle = Lifecycle(services, self._calls, self._runs, self._orchestrator)
        self._sweeper: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        replicas = self._services.replicas
        replicas.handle("stop-thread", self._stop_thread_here)
        replicas.handle("answer-background", self._calls.answer_background_asked)
        replicas.on_dead(self._lifecycle.take_over)
        # Taken for dead (its lease lapsed): the runs it drove were ended by another, so
        # stop driving them without writing anything more.
        replicas.on_declared_dead(self._runs.stop_all)
        await self._lifecycle.recover()
        if self._services.settings.confirmation_timeout_seconds > 0:
            self._sweeper = asyncio.create_task(self._sweep.forever())

    async def close(self) -> None:
        """Stop the sweeper and every driven run; runs end as interrupted (shutdown)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        await self._lifecycle.shut_down()
        if self._turns.provider is not None:
            await self._turns.provider.close()

    # -- entry points ---------------------------------------------------------------------

    async def send_message(
        self,
        thread_id: str,
        text: str,
        message_id: str = "",
        *,
        caller: Caller = LOCAL,
        attachments: Sequence[Attachment] = (),
    ) -> str:
        self._turns.require_provider()
        return await self._runs.start_run(
            thread_id,
            text,
            kind="chat",
            message_id=message_id,
            caller=caller,
            attachments=attachments,
        )

    async def confirm(
        self,
        thread_id: str,
        request_id: str,
        resume: dict[str, Any],
        *,
        caller: Caller = LOCAL,
    ) -> str:
        """Answer a card; only the user whose run asked may (others: as if it did not exist).
        `thread_id` empty: the card's own thread (request ids are unique)."""
        answer = parse_resume(resume)
        services = self._services
        found = await services.hitl.get(request_id)
        run = await services.threads.run(found.run_id)
        mine = run is not None and run.caller.user_id == caller.user_id
        if thread_id not in ("", found.thread_id) or not mine:
            raise NotFoundError(f"no confirmation request {request_id!r} of yours on this thread")
        if found.status != "pending":
            raise FailedPreconditionError(
                f"confirmation request {request_id!r} was already resolved ({found.status})"
            )
        if await self._calls.answer_background_anywhere(found, answer, status="answered"):
            return found.run_id
        self._turns.require_provider()
        await self._runs.resume(found, answer, status="answered")
        return found.run_id

    async def forget_thread(self, thread_id: str) -> None:
        """Stop everything running for a thread that is being deleted, on every replica
        (nothing is written: the thread's rows go with it)."""
        await self._services.replicas.ask("stop-thread", {"thread": thread_id, "forget": True})

    async def cancel_run(self, thread_id: str) -> str | None:
        """Cancel the thread's open run (idempotent): the model stream and running tools are
        aborted, background tasks stopped, open calls closed, `run-finish{cancelled}`."""
        services = self._services
        status = await services.threads.status(thread_id)
        # The run's replica (and any running its background tasks) stops them first.
        await services.replicas.ask("stop-thread", {"thread": thread_id, "forget": False})
        plan = await services.plans.get(thread_id)
        if plan is not None and plan.status in ("active", "awaiting_approval"):
            await services.plans.set_status(thread_id, "cancelled", run_id=status.active_run_id)
        if status.active_run_id is None:
            return None
        run = await services.threads.run(status.active_run_id)
        if run is None:
            return None
        await self._calls.close_calls(run, "Cancelled by the user.")
        await services.hitl.close_run(run.id)
        finished = await services.threads.finish_run(
            thread_id, run.id, status="cancelled", reason="user_cancelled"
        )
        return run.id if finished else None

    async def _stop_thread_here(self, args: dict[str, Any]) -> None:
        """Stop what this replica runs for a thread: its drive, queued follow-ups and
        background tasks — quietly when the thread is being forgotten (deleted), else
        unsettled one by one (the canceller cancels the plan as a whole)."""
        thread_id = args["thread"]
        await self._runs.stop_thread(thread_id)
        background = self._services.background
        if args["forget"]:
            await background.cancel_thread(thread_id, quietly=True)
        else:
            await background.cancel_thread(thread_id, settle=False)
