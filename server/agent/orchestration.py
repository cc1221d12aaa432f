"""Orchestration: background agents, and an approved plan's tasks carried out one after
another (as background agents, or as follow-up runs of the thread for the kinds the
orchestrator executes itself), then a replan or a synthesis when the plan settles.

`Orchestrator` is the narrow handle orchestration tools receive (`Orchestration`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from server.agent.planned_outcomes import judge_build_task, task_run_messages
from server.agent.run_state import RunScope, Suspension
from server.agent.runs import RunDriver
from server.agent.services import AgentServices
from server.agent.tool_calls import AgentCalls
from server.agent.turns import ModelTurns, call_of
from server.core.caller import Caller
from server.runtime.background import Settled, TaskHandle, TaskOutcome
from server.tools.spec import PLANNED_TASK_RUN, Orchestration

__all__ = ["ORCHESTRATOR_TASK_KINDS", "Orchestrator", "planned_task_text"]

# Planned tasks the orchestrator executes itself, as a follow-up run of the thread (the
# seed's executors); `delegate` tasks go to background agents.
ORCHESTRATOR_TASK_KINDS = ("build-workflow", "checkpoint")


class Orchestrator(Orchestration):
    def __init__(
        self, services: AgentServices, turns: ModelTurns, calls: AgentCalls, runs: RunDriver
    ) -> None:
        self._services = services
        self._turns = turns
        self._calls = calls
        self._runs = runs

    # -- background agents ----------------------------------------------------------------

    async def delegate(
        self,
        thread_id: str,
        run_id: str | None,
        *,
        role: str,
        briefing: str,
        key: str | None,
        caller: Caller,
        kind: str | None = None,
        workflow_id: str | None = None,
    ) -> dict[str, Any]:
        spawned = await self._services.background.spawn(
            thread_id,
            role=role,
            body=self._background_body(role, briefing, caller),
            run_id=run_id,
            tools=self._turns.background_tools(),
            title=briefing[:80],
            key=key,
            kind=kind,
            goal=briefing[:2000],
            workflow_id=workflow_id,
        )
        return {"status": spawned.status, "taskId": spawned.task_id, "agentId": spawned.agent_id}

    def _background_body(
        self, role: str, briefing: str, caller: Caller
    ) -> Callable[[TaskHandle], Awaitable[str]]:
        async def body(handle: TaskHandle) -> str:
            return await self._background_run(handle, briefing, caller)

        return body

    async def _background_run(self, handle: TaskHandle, briefing: str, caller: Caller) -> str:
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
        for _ in range(self._services.settings.agent_max_steps):
            corrections = handle.drain_corrections()
            if corrections:
                messages[-1]["content"] = [
                    *messages[-1]["content"],
                    *({"type": "text", "text": f"Correction: {c}"} for c in corrections),
                ]
            turn = await self._turns.turn(scope, messages)
            await self._turns.publish_text(scope, turn)
            text = turn.text or text
            if not turn.tool_uses:
                return text
            messages.append({"role": "assistant", "content": turn.content})
            calls = [call_of(block, turn) for block in turn.tool_uses]
            outcomes = await asyncio.gather(*(self._calls.call(scope, c) for c in calls))
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

    # -- plans ----------------------------------------------------------------------------

    async def schedule_plan(self, thread_id: str, run_id: str | None, caller: Caller) -> int:
        """Start the plan's ready tasks as background agents; when the plan settles, start
        the follow-up run (replan after a failure, synthesize when all succeeded)."""
        background, plans = self._services.background, self._services.plans
        slots = background.limit - len(background.running(thread_id))
        tick = await plans.tick(thread_id, available_slots=slots)
        if tick.action == "replan":
            failed = "; ".join(
                f"{t['id']} ({t['title']}): {t.get('error', 'failed')}" for t in tick.tasks
            )
            plan = await plans.get(thread_id)
            board = "\n".join(
                f"- {t['id']} ({t['title']}): {t['status']}"
                + (f" ({t['error']})" if t.get("error") else "")
                for t in (plan.tasks if plan is not None else [])
            )
            await self._runs.follow_up(
                thread_id,
                f'<planned-task-follow-up type="replan">Planned tasks failed: {failed}.\n'
                f"Every task now:\n{board}\n"
                "Revise the remaining work with create-tasks (planningContext.source "
                '"replan") or explain to the user.</planned-task-follow-up>',
                kind="replan",
                caller=caller,
            )
            return 0
        if tick.action == "synthesize":
            results = "\n".join(f"- {t['title']}: {t.get('result', '')}" for t in tick.tasks)
            plan = await plans.get(thread_id)
            assumptions = (plan.context if plan is not None else {}).get("assumptions") or []
            remind = (
                "\nName the assumptions the plan made: " + "; ".join(assumptions) + "."
                if assumptions
                else ""
            )
            await self._runs.follow_up(
                thread_id,
                f'<planned-task-follow-up type="synthesize">Every planned task finished:\n'
                f"{results}\nSummarise the outcome for the user.{remind}"
                "</planned-task-follow-up>",
                kind="follow-up",
                caller=caller,
            )
            return 0
        started = 0
        plan = await plans.get(thread_id)
        context = plan.context if plan is not None else {}
        for task in tick.tasks:
            await plans.update_task(thread_id, task["id"], run_id=run_id, status="running")
            if task["kind"] in ORCHESTRATOR_TASK_KINDS:
                await self._runs.follow_up(
                    thread_id,
                    planned_task_text(task, context),
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
                tools=self._turns.background_tools(),
                title=task["title"],
                key=f"planned:{task['id']}",
                on_settled=self._planned_task_settled(task["id"], caller),
            )
            if spawned.status == "started":
                started += 1
            else:
                await plans.update_task(thread_id, task["id"], run_id=run_id, status="planned")
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
            await self._services.plans.update_task(
                handle.thread_id, task_id, run_id=handle.run_id, **changes
            )
            if not self._runs.closing:
                await self.schedule_plan(handle.thread_id, handle.run_id, caller)

        return settled

    async def planned_run_ended(
        self, scope: RunScope, task_id: str, caller: Caller, status: str, reason: str | None
    ) -> None:
        """A run that executed a planned task settles it (see `planned_outcomes`), unless
        `complete-checkpoint` already did, and the plan goes on."""
        assert scope.run_id is not None
        plan = await self._services.plans.get(scope.thread_id)
        task = plan.task(task_id) if plan is not None else None
        if task is not None and task["status"] == "running":
            changes = await self._settlement(scope.thread_id, task, status, reason)
            await self._services.plans.update_task(
                scope.thread_id, task_id, run_id=scope.run_id, **changes
            )
        if not self._runs.closing:
            await self.schedule_plan(scope.thread_id, scope.run_id, caller)

    async def _settlement(
        self, thread_id: str, task: dict[str, Any], status: str, reason: str | None
    ) -> dict[str, Any]:
        if status == "cancelled":
            return {"status": "cancelled", "error": "Cancelled by the user"}
        if status != "completed":
            return {"status": "failed", "error": reason or status}
        if task["kind"] == "checkpoint":
            return {
                "status": "failed",
                "error": "Checkpoint run ended without reporting completion",
            }
        messages = task_run_messages(await self._services.conversation.load(thread_id), task["id"])
        verdict = await judge_build_task(task, messages, self._services.loop, thread_id)
        if not verdict.succeeded:
            return {"status": "failed", "error": verdict.reason, "outcome": verdict.outcome}
        result = await self._last_text(thread_id)
        return {"status": "succeeded", "result": result, "outcome": verdict.outcome}

    async def _last_text(self, thread_id: str) -> str:
        """The last thing the assistant said in the thread (a planned task's result)."""
        for message in reversed(await self._services.conversation.load(thread_id)):
            if message["role"] == "assistant":
                texts = [b["text"] for b in message["content"] if b.get("type") == "text"]
                if texts:
                    return "\n".join(texts)[:2000]
        return ""


def planned_task_text(task: dict[str, Any], context: dict[str, Any] | None = None) -> str:
    """The message of the follow-up run that executes a planned task; `context` is the
    plan's planningContext (its assumptions hold for every task)."""
    context = context or {}
    kind, lines = task["kind"], [f"Task: {task['title']}", task["spec"]]
    if task.get("workflowId"):
        lines.append(f"Work on the existing workflow {task['workflowId']}.")
    if assumptions := context.get("assumptions"):
        lines.append("The plan assumes: " + "; ".join(assumptions) + ".")
    if kind == "build-workflow":
        if task.get("isSupportingWorkflow"):
            done = "It is a supporting sub-workflow: saving it finishes it."
        else:
            claim = task.get("claim") or "partial"
            done = (
                f"The task succeeds only when the workflow is saved and its verification "
                f"reaches {claim} (verify-built-workflow, then report-verification-verdict)."
            )
        lines.append(
            "Load the workflow-builder skill, then write the source, build it with "
            "build-workflow and follow the post-build flow (verify, report the verdict). "
            f"{done} End with a short report: it is this task's result."
        )
        if context.get("postBuildRunRequested") and not task.get("isSupportingWorkflow"):
            lines.append(
                "The user asked for a run once it is built: after verification, run it live "
                "with run-workflow (its approval card asks them) and report what the run did."
            )
    else:
        lines.append(
            "Check this against what the earlier tasks built (their work items and "
            "verification records; run or verify again only if they do not settle it). Then "
            f'call complete-checkpoint once with taskId "{task["id"]}": status succeeded '
            "with a short result, or failed with the error and the evidence (outcome). A "
            "checkpoint run that ends without it fails."
        )
    body = "\n".join(lines)
    return (
        f'<planned-task-follow-up type="{kind}" taskId="{task["id"]}">\n{body}\n'
        "</planned-task-follow-up>"
    )
