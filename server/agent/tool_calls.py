"""A run's tool calls: the step's calls through the one tool-call pipeline
(`server/tools/calls.py`) under the agent's policy, their results as the model reads them,
and the cards of the calls that wait for a person (a run suspends; a background agent waits
in this process for the answer)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Literal

import structlog

from server.agent.run_state import Outcome, RunScope, RunState, Suspension
from server.agent.services import AgentServices
from server.agent.turns import ModelTurns
from server.core.failures import describe
from server.errors import FailedPreconditionError, InstanceAIError, NotFoundError
from server.runtime.conversation import estimate_tokens
from server.runtime.events import ORCHESTRATOR, EventLog
from server.runtime.hitl import Confirmation
from server.runtime.threads import RunInfo
from server.tools.calls import CallSite, ToolCalls, Waiting
from server.tools.loading import CORE_TOOLS
from server.tools.registry import dump
from server.tools.spec import PLANNED_TASK_ALLOWS, PLANNED_TASK_RUN, Orchestration, ToolSpec

__all__ = ["OFFLOAD_DIR", "AgentCalls", "AgentPolicy", "StillWaiting"]

log = structlog.get_logger(__name__)

OFFLOAD_DIR = ".tool-results"


class StillWaiting(Exception):
    """A resumed call suspended again; the run stays suspended."""


class AgentPolicy:
    """What a call means in a run: the model may call what it is offered; asking a person
    suspends the run with a card, except in a background agent (which cannot ask for an
    approval) and in a planned task's run (the approved plan was the consent)."""

    records_refusals = True

    def __init__(self, scope: RunScope, turns: ModelTurns, events: EventLog) -> None:
        self._scope = scope
        self._turns = turns
        self._events = events

    async def refusal(self, name: str, spec: ToolSpec[Any] | None) -> InstanceAIError | None:
        scope, turns = self._scope, self._turns
        background, attachments = scope.background, scope.attachments
        if spec is None or not turns.offered(spec, background=background, attachments=attachments):
            return NotFoundError(f"Unknown tool {name!r}; use one of your tools.")
        # Only a tool outside the core needs the thread's loads (read from its history).
        loaded = None if spec.name in CORE_TOOLS else await turns.loaded(scope)
        if not turns.offered(spec, background=background, loaded=loaded, attachments=attachments):
            return FailedPreconditionError(
                f"{spec.name} is not loaded: call load_tool with toolName {spec.name!r}, then "
                "call it from your next turn on."
            )
        return None

    def on_ask(self, spec: ToolSpec[Any]) -> Literal["wait", "allow"] | InstanceAIError:
        if self._scope.kind == PLANNED_TASK_RUN and spec.hitl_action in PLANNED_TASK_ALLOWS:
            return "allow"
        if self._scope.background:
            return FailedPreconditionError(
                f"{spec.name} needs the user's approval, which a background task cannot ask "
                "for; report back that it is needed."
            )
        return "wait"

    def on_question(self, spec: ToolSpec[Any]) -> None:
        return None  # a run suspends; a background agent waits here for the answer

    def running(self, site: CallSite, spec: ToolSpec[Any]) -> None:
        self._events.publish_live(
            site.thread_id,
            "status",
            {"message": f"Running {spec.name}…"},
            run_id=site.run_id,
            agent_id=site.agent_id,
        )


class AgentCalls:
    """The calls of a run's steps and the cards of those that wait."""

    def __init__(self, services: AgentServices, calls: ToolCalls, turns: ModelTurns) -> None:
        self._services = services
        self._calls = calls
        self._turns = turns
        # What orchestration tools reach (plans, delegation), bound once the agent has it.
        self.orchestration: Orchestration | None = None
        # Request id → the background agent waiting for that card's answer.
        self._background_asks: dict[str, asyncio.Future[dict[str, Any]]] = {}

    # -- a step's calls -------------------------------------------------------------------

    async def run_step(self, scope: RunScope, state: RunState) -> bool:
        """Run the step's open calls: those that cannot wait for a person concurrently, the
        rest one by one. True when one suspended the run (its state is saved)."""
        assert scope.run_id is not None
        calls = state.open_calls()
        may_wait = [c for c in calls if await self._may_wait(scope, c)]
        direct = [c for c in calls if c not in may_wait]
        outcomes = await asyncio.gather(*(self.call(scope, c) for c in direct))
        for call, outcome in zip(direct, outcomes, strict=True):
            assert not isinstance(outcome, Suspension)
            state.results[call["id"]] = outcome
        for call in may_wait:
            outcome = await self.call(scope, call)
            if isinstance(outcome, Suspension):
                await self._suspend(scope, state, call, outcome)
                return True
            state.results[call["id"]] = outcome
        await self.append_results(scope, state)
        return False

    async def _may_wait(self, scope: RunScope, call: dict[str, Any]) -> bool:
        if scope.background:
            return False
        return await self._calls.may_wait(scope.thread_id, call["name"], scope.caller)

    async def call(
        self,
        scope: RunScope,
        call: dict[str, Any],
        *,
        answer: dict[str, Any] | None = None,
        gate: Literal["approval", "tool"] | None = None,
    ) -> Outcome:
        """One tool call, to a tool_result block's content, or a suspension. A resumed call
        (`gate` set) was announced before it waited."""
        site = CallSite(
            thread_id=scope.thread_id,
            call_id=call["id"],
            run_id=scope.run_id,
            agent_id=scope.agent_id,
            message_group_id=scope.message_group_id,
            run_kind=scope.kind,
            resume=answer if gate == "tool" else None,
            orchestration=self.orchestration,
            caller=scope.caller,
        )
        policy = AgentPolicy(scope, self._turns, self._services.events)
        try:
            outcome = await self._calls.call(
                site,
                call["name"],
                call["input"],
                policy,
                answer=answer,
                gate=gate,
                malformed=call.get("malformed"),
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # refused or failed: recorded, the model reads why
            return {"content": describe(exc), "is_error": True}
        if isinstance(outcome, Waiting):
            if not scope.background:
                return Suspension(gate=outcome.gate, question=outcome.question)
            answer = await self._ask_from_background(scope, call, outcome.question)
            return await self.call(scope, call, answer=answer, gate="tool")
        return {"content": await self._content(scope, call["id"], dump(outcome)), "is_error": False}

    async def resume_call(self, scope: RunScope, state: RunState, answer: dict[str, Any]) -> None:
        """The suspended call goes on with the person's answer."""
        waiting = state.suspended
        state.suspended = None
        if waiting is None:
            return
        call = next(c for c in state.pending if c["id"] == waiting["toolCallId"])
        outcome = await self.call(scope, call, answer=answer, gate=waiting["gate"])
        if isinstance(outcome, Suspension):  # asked again (e.g. a revised question)
            await self._suspend(scope, state, call, outcome)
            raise StillWaiting
        state.results[call["id"]] = outcome

    async def append_results(self, scope: RunScope, state: RunState) -> None:
        assert scope.run_id is not None
        blocks = [
            {"type": "tool_result", "tool_use_id": c["id"], **state.results[c["id"]]}
            for c in state.pending
        ]
        await self._services.conversation.append(
            scope.thread_id, scope.run_id, [{"role": "user", "content": blocks}]
        )
        state.pending, state.results = [], {}
        await self._services.threads.save_state(scope.run_id, state.dump())

    async def close_calls(self, run: RunInfo, error: str) -> None:
        """Give every open call of the run's step a result, so the history stays valid."""
        state = RunState.load(run.state)
        if not state.pending:
            return
        for call in state.open_calls():
            state.results[call["id"]] = {"content": error, "is_error": True}
        scope = RunScope(
            thread_id=run.thread_id, run_id=run.id, agent_id=ORCHESTRATOR, kind=run.kind
        )
        await self.append_results(scope, state)

    async def _content(self, scope: RunScope, call_id: str, result: dict[str, Any]) -> str:
        """The result as the model reads it; too large → stored in the workspace, pointed to."""
        settings = self._services.settings
        text = json.dumps(result, ensure_ascii=False)
        if estimate_tokens(text) <= settings.agent_tool_result_max_tokens:
            return text
        path = f"{OFFLOAD_DIR}/{call_id}.json"
        try:
            manager = await self._services.sandbox_for(scope.thread_id)
            await manager.write_file(scope.thread_id, path, text.encode())
        except Exception as exc:  # no workspace: cut instead
            keep = settings.agent_tool_result_max_tokens * 4
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

    # -- cards ----------------------------------------------------------------------------

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
        await self._services.threads.save_state(scope.run_id, state.dump(), status="suspended")
        await self._services.hitl.publish(confirmation, agent_id=scope.agent_id)

    async def _card(
        self, scope: RunScope, call: dict[str, Any], question: dict[str, Any]
    ) -> Confirmation:
        """The confirmation row of a call's question (published by the caller)."""
        assert scope.run_id is not None
        return await self._services.hitl.request(
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
            await self._services.hitl.publish(confirmation, agent_id=scope.agent_id)
            return await waiter
        except asyncio.CancelledError:
            # The agent is gone (cancelled, shut down): its card is no question any more.
            cancelled = self._services.hitl.answer(
                scope.thread_id, confirmation.request_id, {}, status="cancelled"
            )
            with contextlib.suppress(Exception):
                await asyncio.shield(cancelled)
            raise
        finally:
            self._background_asks.pop(confirmation.request_id, None)

    async def answer_background_anywhere(
        self, found: Confirmation, answer: dict[str, Any], *, status: str
    ) -> bool:
        """Answer a card a background agent waits on, on whichever replica runs the agent
        (False: no agent waits on it)."""
        args = {"request": found.request_id, "answer": answer, "status": status}
        return any(await self._services.replicas.ask("answer-background", args))

    async def answer_background_asked(self, args: dict[str, Any]) -> bool:
        """Another replica's `answer_background_anywhere`, for a card asked here."""
        waiter = self._background_asks.get(args["request"])
        if waiter is None or waiter.done():
            return False
        found = await self._services.hitl.get(args["request"])
        await self._services.hitl.answer(
            found.thread_id, found.request_id, args["answer"], status=args["status"]
        )
        waiter.set_result(args["answer"])
        return True
