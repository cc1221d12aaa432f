"""The agent's life on one replica among others: what it takes over at start and when a
replica dies (their runs, planned tasks nothing executes any more, calls never closed), and
how it ends its own runs at shutdown."""

from __future__ import annotations

import asyncio

import structlog

from server.agent.orchestration import Orchestrator
from server.agent.runs import RunDriver
from server.agent.services import AgentServices
from server.agent.tool_calls import AgentCalls
from server.core.caller import LOCAL
from server.runtime.threads import RunInfo

__all__ = ["INTERRUPTED", "Lifecycle"]

log = structlog.get_logger(__name__)

INTERRUPTED = "the server stopped during this call"


class Lifecycle:
    def __init__(
        self,
        services: AgentServices,
        calls: AgentCalls,
        runs: RunDriver,
        orchestrator: Orchestrator,
    ) -> None:
        self._services = services
        self._calls = calls
        self._runs = runs
        self._orchestrator = orchestrator
        self._recovered = False
        self._taking_over = asyncio.Lock()

    async def recover(self) -> None:
        """Runs that were active when their replica died are closed as interrupted;
        suspended runs stay suspended and resume on Confirm, on any replica (one executing a
        planned task still settles it then). See `take_over` for the rest."""
        for run in await self._services.threads.open_runs():
            if run.status == "suspended" and (task_id := await self._runs.planned_task_of(run)):
                self._runs.planned_runs[run.id] = (task_id, run.caller)
        if self._services.replicas.is_leader:  # else the leader does, within a heartbeat
            await self.take_over()

    async def take_over(self) -> None:
        """End what dead replicas left: their active runs (interrupted, `tool-interrupted`
        for cut-off calls). When this replica is the only one alive, also fail planned tasks
        nothing executes any more (their run or background agent ended with a process), so
        their plans replan instead of waiting forever, and close tool calls made outside a
        run that never ended; with others alive those may still be running there."""
        replicas = self._services.replicas
        async with self._taking_over:  # start-up and the heartbeat may overlap
            orphans = await self._services.threads.orphaned_runs(replicas.owned_by_live)
            for run in orphans:
                log.warning("ending a run its replica left", run_id=run.id, replica=run.owner)
                await self.interrupt(run, reason="crash_interrupted")
            if (orphans or not self._recovered) and await replicas.alive() == {replicas.id}:
                self._recovered = True
                await self._fail_stranded_tasks()

    async def shut_down(self) -> None:
        """Every run this replica drives ends as interrupted (the others' runs go on)."""
        self._runs.closing = True
        await self._runs.stop_all()
        await self._services.background.cancel_all()
        for run in await self._services.threads.open_runs():
            if run.status == "active" and run.owner == self._services.replicas.id:
                await self.interrupt(run, reason="server_shutdown")

    def _executing_here(self) -> set[str]:
        """The planned tasks this replica executes: in runs (driven or suspended), queued as
        follow-ups, or in background agents."""
        executing = {task_id for task_id, _ in self._runs.planned_runs.values()}
        for queued in self._runs.follow_ups.values():
            executing |= {f.task_id for f in queued if f.task_id is not None}
        keys = self._services.background.keys()
        return executing | {k.removeprefix("planned:") for k in keys if k.startswith("planned:")}

    async def _fail_stranded_tasks(self) -> None:
        executing = self._executing_here()
        services = self._services
        plans = services.plans
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
                owner = await services.threads.run(plan.plan_run_id or "")
                caller = owner.caller if owner is not None else LOCAL
                await self._orchestrator.schedule_plan(plan.thread_id, plan.plan_run_id, caller)
        # Calls made outside a run (Tools.CallTool, background agents) end here too.
        for call in await services.events.unfinished_direct_tool_calls():
            await services.events.append(
                call.thread_id,
                "tool-interrupted",
                {"toolCallId": call.payload.get("toolCallId"), "error": INTERRUPTED},
                agent_id=call.agent_id,
            )

    async def interrupt(self, run: RunInfo, *, reason: str) -> None:
        events = self._services.events
        for call_id in await events.unfinished_tool_calls(run.thread_id, run.id):
            await events.append(
                run.thread_id,
                "tool-interrupted",
                {"toolCallId": call_id, "error": INTERRUPTED},
                run_id=run.id,
            )
        await self._calls.close_calls(
            run, "Interrupted: the server stopped before this call finished."
        )
        await self._services.hitl.close_run(run.id)
        await self._services.threads.finish_run(
            run.thread_id, run.id, status="interrupted", reason=reason
        )
