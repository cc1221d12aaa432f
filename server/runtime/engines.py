"""One Docker engine sandboxes live on, as the service runs it: connecting (and again while
it is away), the owner lease, the warm pool, housekeeping, and the ping that says whether it
answers. `SandboxService` (sandboxes.py) holds one per configured engine.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from sandbox.errors import SandboxError, SandboxOwnerInUseError
from sandbox.lease import OwnerLease
from sandbox.manager import SandboxManager
from sandbox.runtimes import RuntimeChoice

__all__ = ["Connected", "EngineListener", "EngineSlot"]

log = structlog.get_logger(__name__)

# `listener(engine name, answers)` each time an engine goes away or comes back.
EngineListener = Callable[[str, bool], Awaitable[None]]
# How often idle sandboxes are looked for.
SWEEP_INTERVAL_S = 30.0


@dataclass(frozen=True, kw_only=True)
class Connected:
    """What connecting to an engine gives: its managers and this service's lease on it."""

    manager: SandboxManager
    lease: OwnerLease
    # What its sandboxes run under, chosen as it connected.
    runtime: RuntimeChoice
    # The sandbox service API's sandboxes on this engine (None: the API is off).
    service: SandboxManager | None = None

    @property
    def managers(self) -> list[SandboxManager]:
        return [self.manager] + ([self.service] if self.service is not None else [])


@dataclass(kw_only=True)
class EngineSlot:
    name: str
    # Blocking: connect, check the image, take the owner lease (SandboxError otherwise).
    connect: Callable[[], Connected]
    on_change: EngineListener
    # Whether this replica does the once-for-all work (the janitor).
    leads: Callable[[], bool]
    probe_s: float
    janitor_s: float
    connected: Connected | None = None
    up: bool = False
    unavailable: str = "the engine was not reached yet"
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def manager(self) -> SandboxManager | None:
        return self.connected.manager if self.connected is not None else None

    @property
    def service(self) -> SandboxManager | None:
        return self.connected.service if self.connected is not None else None

    async def start(self) -> None:
        """Connect now, or keep trying in the background (an engine or an image that comes
        later is taken up then). SandboxOwnerInUseError goes to the caller."""
        try:
            connected = await asyncio.to_thread(self.connect)
        except SandboxOwnerInUseError:
            raise
        except SandboxError as exc:
            self.unavailable = str(exc)
            log.error("sandbox engine unavailable", engine=self.name, reason=self.unavailable)
            self._spawn(self._connect_later(), "sandbox-engine-wait")
            return
        self._take_up(connected)

    def _take_up(self, connected: Connected) -> None:
        self.connected = connected
        self.up = True
        for manager in connected.managers:
            manager.pool.refill()
            self._spawn(self._housekeep(manager), "sandbox-housekeeping")
        self._spawn(self._watch(connected.manager), "sandbox-engine-watch")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(work, name=f"{name}-{self.name}"))

    async def _connect_later(self) -> None:
        while True:
            await asyncio.sleep(self.probe_s)
            try:
                connected = await asyncio.to_thread(self.connect)
            except SandboxError as exc:
                self.unavailable = str(exc)
                continue
            log.info("sandbox engine available", engine=self.name)
            self._take_up(connected)
            await self.on_change(self.name, True)
            return

    async def _watch(self, manager: SandboxManager) -> None:
        while True:
            await asyncio.sleep(self.probe_s)
            try:
                await asyncio.to_thread(manager.engine.ping)
                up = True
            except Exception as exc:  # any failure to answer is the engine being away
                self.unavailable = f"the container engine {self.name!r} does not answer: {exc}"
                up = False
            if up != self.up:
                self.up = up
                log.warning(
                    "container engine " + ("back" if up else "unreachable"), engine=self.name
                )
                await self.on_change(self.name, up)

    async def _housekeep(self, manager: SandboxManager) -> None:
        loop = asyncio.get_running_loop()
        next_janitor = 0.0
        try:
            if manager.reap_leftovers:
                await manager.reap_all()
        except SandboxError as exc:
            log.warning("clearing leftover commands failed", engine=self.name, error=str(exc))
        while True:
            try:
                if self.leads() and loop.time() >= next_janitor:  # one replica cleans for all
                    await manager.janitor()
                    next_janitor = loop.time() + self.janitor_s
                await manager.sweep_idle()
            except SandboxError as exc:
                log.warning("sandbox housekeeping failed", engine=self.name, error=str(exc))
            await asyncio.sleep(min(SWEEP_INTERVAL_S, self.janitor_s))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.connected is not None:
            # The service stops: nothing of it keeps running (the pool removed, sandboxes
            # suspended or stopped, taken up again at the next start).
            for manager in self.connected.managers:
                await manager.shutdown()
            await asyncio.to_thread(self.connected.lease.release)
            self.connected.manager.engine.close()
