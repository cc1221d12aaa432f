"""The service's view of sandboxes: availability, thread checks, and housekeeping.

Docker is the provider. When it is configured but the engine or the image is missing, the
service still starts (events and threads keep working) and every workspace call answers
UNAVAILABLE saying what to do: a sandbox is never silently replaced by something that does
not isolate.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import select

from sandbox.commands import CommandRunner
from sandbox.docker_engine import DockerEngine, DockerHost
from sandbox.egress import EgressProxy
from sandbox.engine import ContainerEngine, SandboxLimits
from sandbox.errors import SandboxError, SandboxOwnerInUseError, SandboxUnavailableError
from sandbox.identity import sandbox_id
from sandbox.kinds import SERVICE, THREAD, SandboxKind, service_key, service_sandbox_id
from sandbox.lease import OwnerLease
from sandbox.local_engine import LocalEngine
from sandbox.manager import SandboxManager, ThreadPredicate
from sandbox.placement import rank
from sandbox.protocol import Sandboxes
from sandbox.provider import SandboxProvider
from sandbox.runsc_engine import RunscEngine, runsc_usable
from sandbox.runtimes import RUNSC, RuntimeChoice, choose_runtime
from sandbox.workspace_disk import WorkspaceDisks
from server.errors import FailedPreconditionError, NotFoundError, UnavailableError
from server.runtime.egress import egress_root
from server.runtime.engines import Connected, EngineListener, EngineSlot
from server.runtime.placements import Placements
from server.runtime.replicas import Replicas
from server.runtime.threads import OPEN_RUN_STATES
from server.settings import Settings
from server.store import Database
from server.store.deployment import deployment_id
from server.store.models import RunRow, ServiceSandboxRow
from server.store.threads import get_thread

__all__ = [
    "DEFAULT_ENGINE",
    "MIB",
    "SandboxService",
    "build_local",
    "build_manager",
    "connect_engine",
    "connect_manager",
    "docker_hosts",
    "engine_name",
    "sandbox_owner",
    "service_keys",
]

log = structlog.get_logger(__name__)

MIB = 1024 * 1024
# A service sandbox's command streams all its output (n8n's service keeps 16 MiB of events).
SERVICE_OUTPUT_BYTES = 16 * MIB
# The engine DOCKER_HOST names (this host's, by default) when no engines are configured.
DEFAULT_ENGINE = "default"


class SandboxService:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        thread_known: Callable[[str], Awaitable[bool]] | None = None,
        egress: EgressProxy | None = None,
        service_egress: EgressProxy | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        # The sandbox service API's way out (its own policy), when the API is on.
        self._service_egress = service_egress
        # The other replicas of this deployment share its sandboxes (None: this one alone).
        self._replicas = replicas
        self._egress = egress
        # For requests (may cache); the janitor always asks the database.
        self._thread_known = thread_known or self._thread_exists
        self._local: Sandboxes | None = None
        self._unavailable = "sandboxes are disabled (INSTANCE_AI_SANDBOX_PROVIDER=none)"
        self._catalog_dir: Path | None = None
        self._engines: list[EngineSlot] = []
        self._placements = Placements(db)
        self._engine_listeners: list[EngineListener] = []

    async def start(self) -> None:
        provider = self.settings.sandbox_provider
        if provider == "none":
            return
        owner = await sandbox_owner(self.settings, self.db)
        if provider == "local":
            self._local = build_local(self.settings, owner=owner)
            self._unavailable = "local sandboxes carry no sandbox image; use the docker provider"
            return
        # Docker, and only Docker: an unreachable engine is an error, never a quiet switch
        # to something that does not isolate.
        deployment, alone = await deployment_id(self.db), await self._alone()
        for host in docker_hosts(self.settings):
            slot = EngineSlot(
                name=engine_name(host),
                connect=functools.partial(self._connect, host, owner, deployment, alone),
                on_change=self._announce,
                leads=self._leads,
                probe_s=self.settings.sandbox_engine_probe_seconds,
                janitor_s=self.settings.sandbox_janitor_interval_seconds,
            )
            self._engines.append(slot)
            try:
                await slot.start()
            except SandboxOwnerInUseError as exc:
                # Starting anyway would let two deployments remove each other's sandboxes.
                await self.close()
                raise FailedPreconditionError(str(exc)) from None

    async def _alone(self) -> bool:
        """Whether no other replica of this deployment lives: only then are commands left
        running and pooled sandboxes taken over (otherwise they may be another's)."""
        return self._replicas is None or await self._replicas.alive() == {self._replicas.id}

    def _leads(self) -> bool:
        return self._replicas is None or self._replicas.is_leader

    def _connect(
        self, host: DockerHost | None, owner: str, deployment: str, alone: bool
    ) -> Connected:
        """Connect to one engine and set it up (blocking)."""
        name = engine_name(host)
        engine, runtime = connect_engine(self.settings, host, name)
        lease = None
        try:
            image = engine.require_image()
            # A remote engine cannot mount this host's egress sockets or workspace images.
            local = host is None or host.local
            manager = build_manager(
                self.settings,
                engine,
                image=image,
                owner=owner,
                is_busy=self._is_busy,
                thread_exists=functools.partial(self._thread_lives_on, name),
                egress=self._egress if local else None,
                reap_leftovers=alone,
                adopt_pool=alone,
                workspace_limit=local,
                runtime=runtime,
            )
            service = None
            if self.settings.sandbox_api_address is not None:
                service = build_manager(
                    self.settings,
                    engine,
                    image=image,
                    owner=owner,
                    kind=SERVICE,
                    thread_exists=self._service_sandbox_exists,
                    claimed_exists=self._claimed_service_sandbox_exists,
                    egress=self._service_egress if local else None,
                    reap_leftovers=alone,
                    adopt_pool=alone,
                    workspace_limit=local,
                    runtime=runtime,
                )
            lease = OwnerLease.acquire(engine, image=image, owner=owner, deployment=deployment)
            if self._catalog_dir is None:
                self._catalog_dir = engine.extract_catalog(
                    image, self.settings.data_dir / "catalog"
                )
        except SandboxError:
            if lease is not None:
                lease.release()
            engine.close()
            raise
        return Connected(manager=manager, lease=lease, service=service, runtime=runtime)

    def catalog_dir(self) -> Path:
        """Where the running image's node and credential catalog was copied to."""
        if self._catalog_dir is None:
            raise UnavailableError(
                f"the node catalog comes with the sandbox image: {self._why_unavailable()}"
            )
        return self._catalog_dir

    @property
    def engine_needed(self) -> bool:
        """Whether sandboxes depend on a container engine (the docker provider)."""
        return self.settings.sandbox_provider == "docker"

    @property
    def engine_up(self) -> bool:
        """Whether any engine answered its last ping (False when none ever connected)."""
        return any(slot.up for slot in self._engines)

    def engines(self) -> dict[str, bool]:
        """Each configured engine, and whether it answers."""
        return {slot.name: slot.up for slot in self._engines}

    def runtimes(self) -> dict[str, RuntimeChoice]:
        """The runtime of each engine connected so far (chosen when it connected)."""
        return {
            slot.name: slot.connected.runtime
            for slot in self._engines
            if slot.connected is not None
        }

    def on_engine_change(self, listener: EngineListener) -> None:
        """Call `listener(engine, up)` each time an engine goes away or comes back."""
        self._engine_listeners.append(listener)

    async def _announce(self, engine: str, up: bool) -> None:
        for listener in self._engine_listeners:
            await listener(engine, up)

    @property
    def manager(self) -> Sandboxes:
        """The sandboxes of the first engine that answers (the only one, usually); of one
        that answered once if none does now (its calls then say what the engine says)."""
        if self._local is not None:
            return self._local
        answering_first = sorted(self._engines, key=lambda slot: not slot.up)
        managers = [slot.manager for slot in answering_first if slot.manager is not None]
        if not managers:
            raise UnavailableError(self._why_unavailable())
        return managers[0]

    def _why_unavailable(self) -> str:
        if not self._engines:
            return self._unavailable
        return "; ".join(slot.unavailable for slot in self._engines if not slot.up)

    async def for_thread(self, thread_id: str) -> Sandboxes:
        """The sandboxes of the engine the thread lives on, once the thread is known to exist
        (no sandbox for unknown threads)."""
        manager = self.manager
        if not await self._thread_known(thread_id):
            raise NotFoundError(f"thread {thread_id!r} does not exist")
        if len(self._engines) < 2:
            return manager
        return await self._placed(thread_id)

    async def _placed(self, thread_id: str) -> SandboxManager:
        """The thread's engine: where it was placed while that answers; else the first of
        the engines that answer in rendezvous order, which then keeps it."""
        answering = {s.name: s.manager for s in self._engines if s.up and s.manager is not None}
        if not answering:
            raise UnavailableError(self._why_unavailable())
        placed = await self._placements.engine_of(thread_id)
        if placed is not None and placed not in answering:
            placed = await self._placements.engine_of(thread_id, fresh=True)  # moved meanwhile?
        if placed in answering:
            return answering[placed]
        chosen = rank(answering, sandbox_id(thread_id))[0]
        if placed is None:
            await self._placements.place(thread_id, chosen)  # or another replica's choice
            return await self._placed(thread_id)
        if await self._placements.move(thread_id, placed, chosen):
            raise FailedPreconditionError(
                f"this thread's workspace was on the container engine {placed!r}, which is "
                f"not answering: its files are lost to this conversation. A fresh sandbox on "
                f"{chosen!r} takes over; write the files again, then retry"
            )
        return await self._placed(thread_id)

    def for_service(self, sandbox_id: str) -> SandboxManager:
        """The manager of the engine a service sandbox lives on: the first, in rendezvous
        order of its id, of the engines that answer (the same on every replica)."""
        answering = {s.name: s.service for s in self._engines if s.up and s.service is not None}
        if not answering:
            if self.settings.sandbox_api_address is None:
                raise UnavailableError("the sandbox service API is off")
            raise UnavailableError(self._why_unavailable() or "no container engine answers")
        return answering[rank(answering, sandbox_id)[0]]

    def service_managers(self) -> list[SandboxManager]:
        """The service-sandbox managers of the engines that answer."""
        return [s.service for s in self._engines if s.up and s.service is not None]

    async def destroy(self, thread_id: str) -> None:
        if self._local is not None:
            await self._local.destroy(thread_id)
        for slot in self._engines:  # after a move it may have left one on an engine behind
            if slot.up and slot.manager is not None:
                await slot.manager.destroy(thread_id)

    async def close(self) -> None:
        for slot in self._engines:
            await slot.close()
        self._engines.clear()
        if self._local is not None:
            await self._local.close()

    async def _thread_exists(self, thread_id: str) -> bool:
        async with self.db.session() as session:
            return await get_thread(session, thread_id) is not None

    async def _thread_lives_on(self, engine: str, thread_id: str) -> bool:
        """For an engine's janitor: the thread exists and was not moved to another engine."""
        if not await self._thread_exists(thread_id):
            return False
        if len(self._engines) < 2:
            return True
        return await self._placements.engine_of(thread_id, fresh=True) in (None, engine)

    async def _service_sandbox_exists(self, key: str) -> bool:
        """For a service manager's janitor: the sandbox API still has the sandbox's record."""
        sandbox = service_sandbox_id(key)
        if sandbox is None:
            return False
        async with self.db.session() as session:
            return await session.get(ServiceSandboxRow, sandbox) is not None

    async def _claimed_service_sandbox_exists(self, sid: str) -> bool:
        """For a service manager's janitor: a sandbox claimed from the pool (named by its
        sandbox id alone) still has a record."""
        return sid in await service_keys(self.db)

    async def _is_busy(self, thread_id: str) -> bool:
        async with self.db.session() as session:
            open_run = await session.execute(
                select(RunRow.id)
                .where(RunRow.thread_id == thread_id, RunRow.status.in_(OPEN_RUN_STATES))
                .limit(1)
            )
            return open_run.first() is not None


async def service_keys(db: Database) -> dict[str, str]:
    """Every service sandbox's manager key by its container's sandbox id: a sandbox claimed
    from the pool keeps the pool's labels, and only its name says whose it is."""
    async with db.session() as session:
        ids = await session.scalars(select(ServiceSandboxRow.id))
        return {sandbox_id(service_key(i)): service_key(i) for i in ids}


def build_local(settings: Settings, *, owner: str) -> SandboxManager:
    """The manager on local directories (no isolation, no sandbox image)."""
    engine = LocalEngine(settings.data_dir / "local-sandboxes")
    provider = SandboxProvider(engine, image="local", owner=owner)
    return _manager_over(settings, provider, use_worker=False)


async def sandbox_owner(settings: Settings, db: Database) -> str:
    """The owner label of this service's sandboxes: the setting, or one made from the
    database's deployment id (so two deployments on one engine never share one)."""
    return settings.sandbox_owner or f"deployment-{await deployment_id(db)}"


def docker_hosts(settings: Settings) -> list[DockerHost | None]:
    """The configured engines (None: the one DOCKER_HOST names, when none are configured)."""
    return [
        DockerHost(
            url=h.url,
            ca_cert=h.tls_ca_cert,
            client_cert=h.tls_client_cert,
            client_key=h.tls_client_key,
        )
        for h in settings.docker_hosts
    ] or [None]


def engine_name(host: DockerHost | None) -> str:
    return host.url if host is not None else DEFAULT_ENGINE


def connect_manager(
    settings: Settings, *, owner: str, host: DockerHost | None = None, **options: Any
) -> SandboxManager:
    """Connect to a Docker engine (None: DOCKER_HOST's) and set up the manager (blocking),
    for one-off commands. Raises SandboxError with what to do when the engine or the image
    is missing."""
    engine, runtime = connect_engine(settings, host, engine_name(host))
    try:
        return build_manager(
            settings,
            engine,
            image=engine.require_image(),
            owner=owner,
            runtime=runtime,
            **options,
        )
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
    claimed_exists: ThreadPredicate | None = None,
    egress: EgressProxy | None = None,
    reap_leftovers: bool = True,
    adopt_pool: bool = True,
    workspace_limit: bool = True,
    kind: SandboxKind = THREAD,
    runtime: RuntimeChoice | None = None,
) -> SandboxManager:
    """The manager of this owner's sandboxes on `engine`, hardened as configured (blocking),
    under `runtime` (None: chosen here, `engine_runtime`). Raises SandboxError with what to do
    when the workspace limit cannot be kept (it needs the engine on this host:
    `workspace_limit` false for a remote one) or the runtime asked for is missing."""
    s = settings
    runtime = runtime or engine_runtime(settings, engine)
    limited = workspace_limit and s.sandbox_workspace_max_mb
    disks = WorkspaceDisks(s.sandbox_workspace_max_mb * MIB) if limited else None
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
        runtime=runtime.name,
    )
    provider = SandboxProvider(
        engine,
        image=image,
        owner=owner,
        limits=limits,
        egress_root=egress_root(s) if egress is not None else None,
        disks=disks,
        kind=kind,
    )
    log.info(
        "sandboxes ready",
        image=image,
        owner=owner,
        kind=kind.name or "thread",
        runtime=runtime.name,
    )
    shared: dict[str, Any] = {
        "thread_exists": thread_exists,
        "egress": egress,
        "reap_leftovers": reap_leftovers,
        "adopt_pool": adopt_pool,
    }
    if kind.name == SERVICE.name:
        # n8n's service: the whole output streamed (16 MiB kept per execution), no age
        # limit (idle stop and delete end them), its own pool.
        return SandboxManager(
            provider,
            runner=CommandRunner(engine, max_output_bytes=SERVICE_OUTPUT_BYTES),
            idle_ttl=timedelta(seconds=s.sandbox_idle_ttl_seconds),
            max_file_bytes=s.sandbox_api_max_file_bytes,
            default_timeout_s=s.sandbox_command_timeout_seconds,
            pool_size=s.sandbox_api_pool_size,
            claimed_exists=claimed_exists,
            **shared,
        )
    return _manager_over(s, provider, pool_size=s.sandbox_pool_size, is_busy=is_busy, **shared)


def connect_engine(
    settings: Settings, host: DockerHost | None, name: str
) -> tuple[DockerEngine | RunscEngine, RuntimeChoice]:
    """The engine that drives sandboxes for Docker host `host` and the runtime they run
    under: runsc itself where the setting asks for it (or, with `auto`, where it can be
    driven: this host's engine, as root, the runtime runsc), else Docker. Which one is logged
    and kept on the runtime choice (health says it)."""
    docker = DockerEngine.connect(host)
    try:
        runtime = engine_runtime(settings, docker, name)
        driver = settings.sandbox_engine
        if driver == "docker" or runtime.name != RUNSC:
            return docker, runtime
        why_not = runsc_usable() or _why_not_runsc_for(settings, host)
        if why_not is not None:
            if driver == "runsc":
                raise SandboxUnavailableError(
                    f"INSTANCE_AI_SANDBOX_ENGINE=runsc, but runsc cannot be driven here: "
                    f"{why_not}. Set it to auto or docker"
                )
            log.info("sandboxes driven through Docker", engine=name, reason=why_not)
            return docker, runtime
    except SandboxError:
        docker.close()
        raise
    log.info("sandboxes driven by runsc itself", engine=name, root=str(settings.sandbox_runsc_root))
    engine = RunscEngine(docker.client, settings.sandbox_runsc_root)
    return engine, dataclasses.replace(runtime, driver=RUNSC)


def _why_not_runsc_for(settings: Settings, host: DockerHost | None) -> str | None:
    """Why runsc cannot drive the sandboxes of Docker host `host` (None: it can). runsc has no
    remote API: it drives this machine's sandboxes, so only for this machine's first engine
    (another local engine's containers would share its records); several machines each run a
    replica that drives its own (docs/architecture.md, "Several engines")."""
    if host is not None and not host.local:
        return "the Docker engine is on another host"
    first_local = next((h for h in docker_hosts(settings) if h is None or h.local), host)
    if host != first_local:
        return "runsc drives this host's first engine only"
    return None


def engine_runtime(settings: Settings, engine: ContainerEngine, name: str = "") -> RuntimeChoice:
    """The runtime for sandboxes on `engine` (named `name` in what it says): the setting, with
    `auto` resolved against the runtimes the engine has; a fallback is logged as a warning."""
    choice = choose_runtime(settings.sandbox_runtime, engine.runtimes(), name)
    if choice.warning:
        log.warning("sandboxes share the host's kernel", reason=choice.warning)
    return choice


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
        pool_window=timedelta(seconds=s.sandbox_pool_window_seconds),
        default_timeout_s=s.sandbox_command_timeout_seconds,
        **options,
    )
