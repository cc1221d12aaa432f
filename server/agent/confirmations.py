"""Cards nobody answers: past the timeout (INSTANCE_AI_CONFIRMATION_TIMEOUT_SECONDS) they
are denied, and their runs go on with the denial."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import structlog

from server.agent.runs import RunDriver
from server.agent.services import AgentServices
from server.agent.tool_calls import AgentCalls
from server.errors import FailedPreconditionError
from server.runtime.hitl import DENIED_BY_TIMEOUT, parse_resume

__all__ = ["ConfirmationSweep"]

log = structlog.get_logger(__name__)


class ConfirmationSweep:
    def __init__(
        self, services: AgentServices, calls: AgentCalls, runs: RunDriver, *, has_model: bool
    ) -> None:
        self._services = services
        self._calls = calls
        self._runs = runs
        self._has_model = has_model

    async def forever(self) -> None:
        while True:
            await asyncio.sleep(self._services.settings.confirmation_sweep_interval_seconds)
            if not self._services.replicas.is_leader:
                continue  # one replica sweeps for all
            try:
                await self.sweep()
            except Exception:
                log.exception("confirmation sweep failed")

    async def sweep(self) -> int:
        """Deny confirmations older than the timeout; their runs go on with the denial."""
        services = self._services
        age = timedelta(seconds=services.settings.confirmation_timeout_seconds)
        expired = await services.hitl.older_than(age)
        denial = parse_resume(DENIED_BY_TIMEOUT)
        for found in expired:
            try:
                if await self._calls.answer_background_anywhere(found, denial, status="expired"):
                    continue
                if not self._has_model:
                    await services.hitl.answer(
                        found.thread_id, found.request_id, DENIED_BY_TIMEOUT, status="expired"
                    )
                    await services.threads.finish_run(
                        found.thread_id,
                        found.run_id,
                        status="cancelled",
                        reason="confirmation_timeout",
                    )
                else:
                    await self._runs.resume(found, denial, status="expired")
            except FailedPreconditionError:
                continue  # answered meanwhile
        return len(expired)
