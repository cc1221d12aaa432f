"""Servers ("lanes") the cases are spread over: least loaded first; a lane with three
transport failures in a row is quarantined and probed until it answers again; when every lane
has been quarantined for the abort window the run gives up."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from evals.client import EvalClient
from evals.errors import LanesExhaustedError
from instance_ai_client.connection import ClientConfig

__all__ = ["ABORT_AFTER_SECONDS", "PROBE_INTERVAL_SECONDS", "QUARANTINE_AFTER", "Lane", "Lanes"]

QUARANTINE_AFTER = 3
PROBE_INTERVAL_SECONDS = 30.0
ABORT_AFTER_SECONDS = 300.0


@dataclass(eq=False, kw_only=True)
class Lane:
    address: str
    client: EvalClient
    in_flight: int = 0
    failures_in_a_row: int = 0
    quarantined: bool = False


class Lanes:
    def __init__(
        self,
        configs: list[ClientConfig],
        *,
        probe_interval: float = PROBE_INTERVAL_SECONDS,
        abort_after: float = ABORT_AFTER_SECONDS,
        on_note: Callable[[str], None] = lambda _note: None,
    ) -> None:
        self.lanes = [Lane(address=c.server, client=EvalClient(c)) for c in configs]
        self._probe_interval = probe_interval
        self._abort_after = abort_after
        self._note = on_note
        self._changed = asyncio.Condition()
        self._all_down_since: float | None = None
        self._prober: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lanes:
        self._prober = asyncio.create_task(self._probe_forever())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
        for lane in self.lanes:
            await lane.client.close()

    async def acquire(self, avoid: set[str]) -> Lane:
        """The least loaded healthy lane, preferring those not in `avoid` (where this case
        already failed); waits while none is healthy."""
        async with self._changed:
            while True:
                healthy = [lane for lane in self.lanes if not lane.quarantined]
                if healthy:
                    fresh = [lane for lane in healthy if lane.address not in avoid] or healthy
                    lane = min(fresh, key=lambda candidate: candidate.in_flight)
                    lane.in_flight += 1
                    return lane
                assert self._all_down_since is not None
                left = self._abort_after - (time.monotonic() - self._all_down_since)
                if left <= 0:
                    raise LanesExhaustedError(
                        f"every server has been unreachable for {self._abort_after:.0f} s: "
                        + ", ".join(lane.address for lane in self.lanes)
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=left)

    async def release(self, lane: Lane, *, transport_failed: bool) -> None:
        async with self._changed:
            lane.in_flight -= 1
            if not transport_failed:
                lane.failures_in_a_row = 0
            else:
                lane.failures_in_a_row += 1
                if lane.failures_in_a_row >= QUARANTINE_AFTER and not lane.quarantined:
                    self._quarantine(lane, f"{lane.failures_in_a_row} transport failures in a row")
            self._changed.notify_all()

    async def quarantine(self, lane: Lane, why: str) -> None:
        async with self._changed:
            if not lane.quarantined:
                self._quarantine(lane, why)
            self._changed.notify_all()

    def _quarantine(self, lane: Lane, why: str) -> None:
        lane.quarantined = True
        self._note(
            f"{lane.address}: {why}; quarantined (probed every {self._probe_interval:.0f} s)"
        )
        if all(other.quarantined for other in self.lanes):
            self._all_down_since = time.monotonic()

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.sleep(self._probe_interval)
            for lane in [lane for lane in self.lanes if lane.quarantined]:
                if await lane.client.healthy():
                    async with self._changed:
                        lane.quarantined = False
                        lane.failures_in_a_row = 0
                        self._all_down_since = None
                        self._changed.notify_all()
                    self._note(f"{lane.address}: answering again, back in service")
