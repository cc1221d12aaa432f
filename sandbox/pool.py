"""The warm pool, and the templates new sandboxes are restored from.

- **The pool** holds started, seeded sandboxes with their worker running, warmed by a build
  (and, ready to verify, a run) so a thread's first build costs what warm ones do. A new thread
  claims one instead of waiting for a container; the pool is topped up in the background. How
  many members are warmed with the engine follows what claimed ones went on to use
  (readiness.py). Unclaimed members left by an earlier process of the owner are taken over.
- **As many members as the claims need** (engines with snapshots, where a sandbox comes from a
  template in a fraction of a second): a running member costs CPU even idle (gVisor), so the
  pool keeps twice the claims expected while one member is made (the arrival rate of claims
  over the last window times the time to make one), at least one, up to its size; none once
  nothing was claimed for a window (a claim then waits for a restore). Until a window has
  passed since the start, the whole size. Elsewhere the pool is always full.
- **Templates** (engines with snapshots, runsc): per image, kind and readiness, the checkpoint of
  a warmed sandbox, made in the background at first need (templates.py). New sandboxes and pool
  members are restored from it, already warm; a restore that fails is logged and counted, the
  template made again, and the sandbox started cold.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from collections import deque
from pathlib import Path

import structlog

from sandbox.blocking import in_thread
from sandbox.engine import ContainerInfo, Snapshots
from sandbox.entries import SandboxEntry
from sandbox.errors import SandboxError
from sandbox.identity import LABEL_IMAGE
from sandbox.provider import RestoreFailedError, SandboxProvider
from sandbox.readiness import Readiness, ReadinessMix
from sandbox.templates import Templates
from sandbox.worker import HOST_GUARD_S, THREAD_LOAD_S, WorkerClient
from sandbox.workspace_seed import initialise

__all__ = ["DEMAND_WINDOW_S", "WARM_TIMEOUT_S", "WarmPool"]

log = structlog.get_logger(__name__)

# The deadline of each of a pool sandbox's warm-up build and run (their threads' loads, ~2 s
# of CPU in all, are not charged to it; a busy machine stretches them).
WARM_TIMEOUT_S = 60.0
# The window over which claims are counted to size the pool (engines with snapshots).
DEMAND_WINDOW_S = 300.0
# What making a member is taken to cost before one was timed (a restore: docs/performance.md).
MAKE_GUESS_S = 0.5


class WarmPool:
    def __init__(
        self,
        provider: SandboxProvider,
        *,
        size: int,
        use_worker: bool,
        adopt: bool,
        demand_window_s: float = DEMAND_WINDOW_S,
    ) -> None:
        self.provider = provider
        self.engine = provider.engine
        # The most members kept; where they are sized by demand, the ceiling (`target`).
        self.size = size
        self.use_worker = use_worker
        self.demand_window_s = demand_window_s
        self._started = time.monotonic()
        self._claimed_at: deque[float] = deque(maxlen=10_000)
        self._make_s: deque[float] = deque(maxlen=20)
        # Started, seeded sandboxes (with their worker) waiting for a thread.
        self.members: list[SandboxEntry] = []
        # How many members are warmed with the engine: what claimed ones went on to use.
        self.readiness = ReadinessMix()
        # The refill under way (one at a time).
        self.refilling: asyncio.Task[None] | None = None
        # Whether unclaimed pool sandboxes left by an earlier process are taken over (not
        # when other live services of the owner may be using theirs).
        self._adopted = not adopt
        self._closing = False
        # Where the engine keeps snapshots (runsc): new sandboxes and pool members are restored
        # from a warm template, made in the background at first need.
        self.templates: Templates | None = None
        if isinstance(self.engine, Snapshots) and use_worker:
            self.templates = Templates(
                self.engine.template_root,
                image=provider.image,
                kind=provider.kind,
                egress=provider.egress_root is not None,
            )
        self._template_tasks: dict[Readiness, asyncio.Task[None]] = {}

    def count(self) -> int:
        return len(self.members)

    def target(self) -> int:
        """How many members to keep running now (see the module's docstring)."""
        if self.templates is None:
            return self.size
        now = time.monotonic()
        while self._claimed_at and now - self._claimed_at[0] > self.demand_window_s:
            self._claimed_at.popleft()
        if not self._claimed_at:
            started_lately = now - self._started < self.demand_window_s
            return self.size if started_lately else 0
        rate = len(self._claimed_at) / self.demand_window_s
        make_s = statistics.median(self._make_s) if self._make_s else MAKE_GUESS_S
        return min(self.size, max(1, math.ceil(2 * rate * make_s)))

    async def trim(self) -> list[str]:
        """Remove the members beyond the target, the longest-waiting first (the housekeeping's
        idle sweep asks); the names of those removed."""
        removed = []
        while len(self.members) > self.target() and not self._closing:
            member = self.members.pop(0)
            member.drop_worker()
            await in_thread(self.provider.discard, member.container)
            removed.append(member.container.name)
        if removed:
            log.info("pool members no claim needs removed", members=removed)
        return removed

    async def claim(self, thread_id: str) -> SandboxEntry | None:
        """A warm sandbox for a thread that has none yet (its own one always wins)."""
        if not (self.size or self.members):
            return None
        if await in_thread(self.provider.get, thread_id) is not None:
            return None
        self._claimed_at.append(time.monotonic())
        while self.members:
            pooled = self.members.pop(0)
            if not await in_thread(self.provider.still_running, pooled.container):
                # Stopped since it was warmed (an engine restart, a kill from outside).
                pooled.drop_worker()
                await in_thread(self.provider.discard, pooled.container)
                continue
            claimed = await in_thread(self.provider.claim, thread_id, pooled.container)
            if claimed is not None:
                pooled.container = claimed
                pooled.last_used = time.monotonic()
                pooled.claim = self.readiness.claimed()
                self.refill()
                return pooled
            pooled.drop_worker()  # another process claimed it
        self.refill()
        return None

    def refill(self) -> None:
        """Top the pool up in the background (one refill at a time)."""
        if self._closing:
            return
        if self.size > 0 and (self.refilling is None or self.refilling.done()):
            self.refilling = asyncio.create_task(self.fill(), name="sandbox-pool-refill")

    async def fill(self) -> None:
        """Bring the pool to its size, adopting unclaimed pool sandboxes of the current image
        left by an earlier process before creating new ones."""
        if not self._adopted:
            self._adopted = True
            for container in await in_thread(self.provider.pooled):
                stale = container.labels.get(LABEL_IMAGE) != self.provider.image
                foreign = not self.provider.fits(container)
                if stale or foreign or len(self.members) >= self.size:
                    # Another image, another process layout (its egress directory is not
                    # ours) or runtime, or one too many: nobody's files are in it.
                    await in_thread(self.provider.discard, container)
                    continue
                await self._add(container)
        while len(self.members) < self.target() and not self._closing:
            readiness = self.next_readiness()
            template = self.template(readiness)
            began = time.monotonic()
            try:
                container = await in_thread(self.provider.create_pooled, template)
            except RestoreFailedError as exc:
                self.restore_failed(template, exc)
                container, template = await in_thread(self.provider.start, exc.container), None
            if not await self._add(container, readiness, warm=template is None):
                return  # the next claim tries the refill again
            if template is not None:
                self._make_s.append(time.monotonic() - began)
        # A template is wanted even while no member is: a claim then restores from it.
        self.template(self.next_readiness())

    def next_readiness(self) -> Readiness:
        """What the next sandbox is warmed for, as the traffic needs (readiness.py)."""
        return self.readiness.next_member(
            pool_size=max(self.size, 1),
            ready_to_verify=sum(e.readiness == Readiness.VERIFY for e in self.members),
        )

    async def _add(
        self, container: ContainerInfo, readiness: Readiness | None = None, *, warm: bool = True
    ) -> bool:
        """Warm `container` into the pool (unless restored warm: `warm` false), as ready as
        the traffic needs; one that does not get ready is discarded."""
        readiness = readiness or self.next_readiness()
        try:
            self.members.append(await in_thread(self.warm, container, readiness, warm))
        except SandboxError as exc:
            log.warning("discarding a pool sandbox that did not get ready", reason=str(exc))
            await in_thread(self.provider.discard, container)
            return False
        return True

    def warm(
        self, container: ContainerInfo, readiness: Readiness, warm: bool = True
    ) -> SandboxEntry:
        """A pool member ready to work: started, initialised, and (with the image) its worker
        running with the compiler loaded by one warm-up build and, ready to verify, the
        engine by a warm-up run, so a thread's first build (and verification) cost what warm
        ones do. One restored from a warm template (`warm` false) needs no warm-up."""
        if container.status != "running":
            container = self.provider.start(container)
        initialise(self.engine, self.provider.kind, container)
        worker = WorkerClient.start(self.engine, container.id) if self.use_worker else None
        if (
            worker is not None
            and warm
            and self.engine.runs_image
            and self.provider.kind.warm_toolchain
        ):
            try:
                took = worker.call(
                    "warm",
                    # Its build and its run each get timeoutMs, after loading their thread
                    # (up to THREAD_LOAD_S, not charged to it): the host waits for both.
                    timeout_s=2 * (WARM_TIMEOUT_S + THREAD_LOAD_S) + HOST_GUARD_S,
                    timeoutMs=WARM_TIMEOUT_S * 1000,
                    engine=readiness == Readiness.VERIFY,
                )
            except SandboxError:
                worker.close()
                raise
            log.debug("pool sandbox warmed", container=container.name, **took)
        return SandboxEntry(
            container=container, last_used=time.monotonic(), worker=worker, readiness=readiness
        )

    # -- templates (engines with snapshots) ---------------------------------------------

    def template(self, readiness: Readiness) -> Path | None:
        """The template new sandboxes of this readiness are restored from; None (a cold
        start) until it is made, which starts in the background now."""
        if self.templates is None:
            return None
        found = self.templates.ready(readiness)
        if found is None and not self._closing:
            task = self._template_tasks.get(readiness)
            if task is None or task.done():
                self._template_tasks[readiness] = asyncio.create_task(
                    in_thread(self._make_template, readiness),
                    name=f"sandbox-template-{readiness}",
                )
        return found

    def _make_template(self, readiness: Readiness) -> None:
        """Warm a sandbox made cold, close its worker's channel (the worker then holds
        nothing of the host's), checkpoint it as the template, remove it."""
        assert self.templates is not None and isinstance(self.engine, Snapshots)
        engine = self.engine
        container = self.provider.create_template_source()
        try:
            entry = self.warm(container, readiness)
            entry.drop_worker()
            self.templates.save(
                readiness, lambda path: engine.checkpoint(container.id, path, leave_running=False)
            )
        except SandboxError as exc:
            log.warning("making a sandbox template failed", readiness=readiness, reason=str(exc))
        finally:
            self.provider.discard(container)

    def restore_failed(self, template: Path | None, exc: RestoreFailedError) -> None:
        """A restore that failed: counted, logged, its template made again at the next need
        (the sandbox is then started cold)."""
        assert self.templates is not None and template is not None
        log.warning("restoring a sandbox failed; starting it cold", reason=str(exc))
        self.templates.discard(template)

    async def close(self, *, discard: bool) -> None:
        """Stop refilling and making templates (waiting for what is under way: cancelling the
        wait would leave the engine call in its thread to finish after the rest was torn
        down); let go of the members, removing them when `discard`."""
        self._closing = True
        if self.refilling is not None:
            with contextlib.suppress(SandboxError):
                await self.refilling
        for task in self._template_tasks.values():
            with contextlib.suppress(SandboxError):
                await task
        members, self.members = self.members, []
        for pooled in members:
            pooled.drop_worker()
            if discard:
                await in_thread(self.provider.discard, pooled.container)
