"""The service's view of sandboxes: availability, thread checks, and housekeeping.

Docker is the provider. When it is configured but the engine or the image is missing, the
service still starts (events and threads keep working) and every workspace call answers
UNAVAILABLE saying what to do: a sandbox is never silently replaced by something that does
not isolate.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import select

from sandbox.commands import CommandRunner
from sandbox.docker_engine import DockerEngine
from sandbox.egress import EgressProxy
from sandbox.engine import ContainerEngine, SandboxLimits
from sandbox.errors import SandboxError, SandboxOwnerInUseError
from sandbox.lease import OwnerLease
from sandbox.local_engine import LocalEngine
from sandbox.manager import SandboxManager, ThreadPredicate
from sandbox.protocol import Sandboxes
from sandbox.provider import SandboxProvider
from sandbox.workspace_disk import WorkspaceDisks
from server.errors import FailedPreconditionError, NotFoundError, UnavailableError
from server.runtime.egress import egress_root
from server.runtime.replicas import Replicas
from server.runtime.threads import OPEN_RUN_STATES
from server.settings import Settings
from server.store import Database
from server.store.deployment import deployment_id
from server.store.models import RunRow
from server.store.threads import get_thread

__all__ = [
    "MIB",
    "SWEEP_INTERVAL_S",
    "EngineListener",
    "SandboxService",
    "build_local",
    "build_manager",
    "connect_manager",
    "sandbox_owner",
]

log = structlog.get_logger(__name__)

EngineListener = Callable[[bool], Awaitable[None]]

MIB = 1024 * 1024
# How often idle sandboxes are looked for.
SWEEP_INTERVAL_S = 30.0


class SandboxService:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        thread_known: Callable[[str], Awaitable[bool]] | None = None,
        egress: EgressProxy | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        # The other replicas of this deployment share its sandboxes (None: this one alone).
        self._replicas = replicas
        self._egress = egress
        # For requests (may cache); the janitor always asks the database.
        self._thread_known = thread_known or self._thread_exists
        self._manager: Sandboxes | None = None
        self._unavailable = "sandboxes are disabled (INSTANCE_AI_SANDBOX_PROVIDER=none)"
        self._housekeeping: asyncio.Task[None] | None = None
        self._catalog_dir: Path | None = None
        self._lease: OwnerLease | None = None
        self._deployment = ""
        self._engine_up = False
        self._engine_listeners: list[EngineListener] = []
        self._engine_watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        provider = self.settings.sandbox_provider
        if provider == "none":
            return
        if provider == "local":
            self._manager = build_local(
                self.settings, owner=await sandbox_owner(self.settings, self.db)
            )
            self._unavailable = "local sandboxes carry no sandbox image; use the docker provider"
            return
        # Docker, and only Docker: an unreachable engine is an error, never a quiet switch
        # to something that does not isolate.
        owner = await sandbox_owner(self.settings, self.db)
        self._deployment = await deployment_id(self.db)
        try:
            manager = await asyncio.to_thread(self._connect, owner, await self._alone())
        except SandboxOwnerInUseError as exc:
            # Starting anyway would let two services remove each other's sandboxes.
            raise FailedPreconditionError(str(exc)) from None
        except SandboxError as exc:
            self._unavailable = str(exc)
            log.error("sandboxes unavailable", reason=self._unavailable)
            # An engine that comes up later (or an image built later) is taken up then.
            self._engine_watch = asyncio.create_task(
                self._connect_later(owner), name="sandbox-engine-wait"
            )
            return
        self._take_up(manager)

    def _take_up(self, manager: SandboxManager) -> None:
        self._manager = manager
        self._engine_up = True
        manager.refill_pool()
        self._housekeeping = asyncio.create_task(
            self._housekeep(manager), name="sandbox-housekeeping"
        )
        self._engine_watch = asyncio.create_task(
            self._watch_engine(manager), name="sandbox-engine-watch"
        )

    async def _connect_later(self, owner: str) -> None:
        while True:
            await asyncio.sleep(self.settings.sandbox_engine_probe_seconds)
            try:
                manager = await asyncio.to_thread(self._connect, owner, await self._alone())
            except SandboxError as exc:
                self._unavailable = str(exc)
                continue
            log.info("sandboxes available again")
            self._take_up(manager)
            await self._announce(True)
            return

    @property
    def engine_needed(self) -> bool:
        """Whether sandboxes depend on a container engine (the docker provider)."""
        return self.settings.sandbox_provider == "docker"

    @property
    def engine_up(self) -> bool:
        """Whether the engine answered its last ping (False when it never connected)."""
        return self._engine_up

    def on_engine_change(self, listener: EngineListener) -> None:
        """Call `listener(up)` each time the engine goes away or comes back."""
        self._engine_listeners.append(listener)

    async def _watch_engine(self, manager: SandboxManager) -> None:
        while True:
            await asyncio.sleep(self.settings.sandbox_engine_probe_seconds)
            try:
                await asyncio.to_thread(manager.engine.ping)
                up = True
            except Exception:  # any failure to answer is the engine being away
                up = False
            if up != self._engine_up:
                self._engine_up = up
                log.warning("container engine " + ("back" if up else "unreachable"))
                await self._announce(up)

    async def _announce(self, up: bool) -> None:
        for listener in self._engine_listeners:
            await listener(up)

    async def _alone(self) -> bool:
        """Whether no other replica of this deployment lives: only then are commands left
        running and pooled sandboxes taken over (otherwise they may be another's)."""
        return self._replicas is None or await self._replicas.alive() == {self._replicas.id}

    def _connect(self, owner: str, alone: bool) -> SandboxManager:
        engine = DockerEngine.connect()
        try:
            image = engine.require_image()
            manager = build_manager(
                self.settings,
                engine,
                image=image,
                owner=owner,
                is_busy=self._is_busy,
                thread_exists=self._thread_exists,
                egress=self._egress,
                reap_leftovers=alone,
                adopt_pool=alone,
            )
            self._lease = OwnerLease.acquire(
                engine, image=image, owner=owner, deployment=self._deployment
            )
            self._catalog_dir = engine.extract_catalog(image, self.settings.data_dir / "catalog")
        except SandboxError:
            if self._lease is not None:
                self._lease.release()
                self._lease = None
            engine.close()
            raise
        return manager

    def catalog_dir(self) -> Path:
        """Where the running image's node and credential catalog was copied to."""
        if self._catalog_dir is None:
            raise UnavailableError(
                f"the node catalog comes with the sandbox image: {self._unavailable}"
            )
        return self._catalog_dir

    @property
    def manager(self) -> Sandboxes:
        if self._manager is None:
            raise UnavailableError(self._unavailable)
        return self._manager

    async def for_thread(self, thread_id: str) -> Sandboxes:
        """The manager, once the thread is known to exist (no sandbox for unknown threads)."""
        manager = self.manager
        if not await self._thread_known(thread_id):
            raise NotFoundError(f"thread {thread_id!r} does not exist")
        return manager

    async def destroy(self, thread_id: str) -> None:
        if self._manager is not None:
            await self._manager.destroy(thread_id)

    async def close(self) -> None:
        for task in (self._housekeeping, self._engine_watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._manager is not None:
            await self._manager.close()
            if self._lease is not None:
                await asyncio.to_thread(self._lease.release)
            if isinstance(self._manager, SandboxManager):
                self._manager.engine.close()

    async def _housekeep(self, manager: SandboxManager) -> None:
        janitor_every = self.settings.sandbox_janitor_interval_seconds
        next_janitor = 0.0
        loop = asyncio.get_running_loop()
        try:
            if manager.reap_leftovers:
                await manager.reap_all()
        except SandboxError as exc:
            log.warning("clearing leftover commands failed", error=str(exc))
        while True:
            try:
                leads = self._replicas is None or self._replicas.is_leader
                if leads and loop.time() >= next_janitor:  # one replica cleans up for all
                    await manager.janitor()
                    next_janitor = loop.time() + janitor_every
                await manager.sweep_idle()
            except SandboxError as exc:
                log.warning("sandbox housekeeping failed", error=str(exc))
            await asyncio.sleep(min(SWEEP_INTERVAL_S, janitor_every))

    async def _thread_exists(self, thread_id: str) -> bool:
        async with self.db.session() as session:
            return await get_thread(session, thread_id) is not None

    async def _is_busy(self, thread_id: str) -> bool:
        async with self.db.session() as session:
            open_run = await session.execute(
                select(RunRow.id)
                .where(RunRow.thread_id == thread_id, RunRow.status.in_(OPEN_RUN_STATES))
                .limit(1)
            )
            return open_run.first() is not None


def build_local(settings: Settings, *, owner: str) -> SandboxManager:
    """The manager on local directories (no isolation, no sandbox image)."""
    engine = LocalEngine(settings.data_dir / "local-sandboxes")
    provider = SandboxProvider(engine, image="local", owner=owner)
    return _manager_over(settings, provider, use_worker=False)


async def sandbox_owner(settings: Settings, db: Database) -> str:
    """The owner label of this service's sandboxes: the setting, or one made from the
    database's deployment id (so two deployments on one engine never share one)."""
    return settings.sandbox_owner or f"deployment-{await deployment_id(db)}"


def connect_manager(settings: Settings, *, owner: str, **options: Any) -> SandboxManager:
    """Connect to the Docker engine and set up the manager (blocking), for one-off commands.
    Raises SandboxError with what to do when the engine or the image is missing."""
    engine = DockerEngine.connect()
    try:
        return build_manager(settings, engine, image=engine.require_image(), owner=owner, **options)
    except SandboxError:
        engine.close()
        raise


def build_manager(
    settings: Settings,
    engine: ContainerEngine,
    *,
    image: str,
    owner: str,
    is_busy: ThreadPredicate | None = None,
    thread_exists: ThreadPredicate | None = None,
    egress: EgressProxy | None = None,
    reap_leftovers: bool = True,
    adopt_pool: bool = True,
) -> SandboxManager:
    """The manager of this owner's sandboxes on `engine`, hardened as configured (blocking).
    Raises SandboxError with what to do when the workspace limit cannot be kept."""
    s = settings
    disks = WorkspaceDisks(s.sandbox_workspace_max_mb * MIB) if s.sandbox_workspace_max_mb else None
    if disks is not None:
        disks.check()
    limits = SandboxLimits(
        network_mode=s.sandbox_network_mode,
        read_only=s.sandbox_read_only,
        no_new_privileges=s.sandbox_no_new_privileges,
        init=s.sandbox_init,
        user=s.sandbox_user,
        pids_limit=s.sandbox_pids_limit,
        memory_bytes=s.sandbox_memory_mb * MIB,
        cpus=s.sandbox_cpus,
        tmp_size=s.sandbox_tmp_size,
    )
    provider = SandboxProvider(
        engine,
        image=image,
        owner=owner,
        limits=limits,
        egress_root=egress_root(s) if egress is not None else None,
        disks=disks,
    )
    log.info("sandboxes ready", image=image, owner=owner)
    return _manager_over(
        s,
        provider,
        pool_size=s.sandbox_pool_size,
        is_busy=is_busy,
        thread_exists=thread_exists,
        egress=egress,
        reap_leftovers=reap_leftovers,
        adopt_pool=adopt_pool,
    )


def _manager_over(settings: Settings, provider: SandboxProvider, **options: Any) -> SandboxManager:
    """The manager with the settings both providers share (Docker's and local's)."""
    s = settings
    return SandboxManager(
        provider,
        runner=CommandRunner(provider.engine, max_output_bytes=s.sandbox_max_output_bytes),
        idle_ttl=timedelta(seconds=s.sandbox_idle_ttl_seconds),
        ephemeral=s.sandbox_ephemeral,
        max_age=timedelta(hours=s.sandbox_max_age_hours),
        max_file_bytes=s.sandbox_max_file_bytes,
        default_timeout_s=s.sandbox_command_timeout_seconds,
        **options,
    )
