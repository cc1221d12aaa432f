"""The thread-scoped sandbox manager: the one object the rest of the service talks to.

- **Lazy and single-flight**: a thread's sandbox is found or created on first use; concurrent
  first uses of one thread share one creation.
- **Initialised once**: the workspace seed is copied in and the marker `.sandbox-initialized`
  written in one step; a sandbox that has the marker is never seeded again, so a restart or a
  reattach keeps the user's files.
- **Self-healing**: a container stopped or removed from outside is started or recreated on
  next use (the workspace volume survives).
- **Idle eviction** drops only the in-process cache entry after `idle_ttl` (the container
  stays), never for a thread the `is_busy` callback says has an active or suspended run or a
  running background task, nor while a command runs. In ephemeral mode idle sandboxes are
  destroyed instead.
- **Janitor**: removes sandboxes of threads that no longer exist, sandboxes older than
  `max_age`, and workspace volumes left without a container, by owner label.

It works against the container-engine seam (`engine.py`) through `SandboxProvider`: Docker,
or local directories (no isolation). Engine calls block, so each runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import posixpath
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import structlog

from sandbox import files
from sandbox.commands import CommandResult, CommandRunner, JobCounter, OutputCallback
from sandbox.egress import BRIDGE_PORT, MOUNT_POINT, EgressProxy
from sandbox.engine import ContainerInfo, Snapshots
from sandbox.errors import SandboxError, SandboxUnavailableError, WorkspaceFullError
from sandbox.identity import LABEL_IMAGE
from sandbox.image.browser import BROWSER_ENVIRONMENT, browser_command
from sandbox.image.rootfs import APP_DIR, WORKSPACE
from sandbox.provider import RestoreFailedError, SandboxInfo, SandboxProvider
from sandbox.readiness import ENGINE_OPS, Claim, Readiness, ReadinessMix
from sandbox.search import GrepQuery, GrepResult
from sandbox.streams import ProcessStream
from sandbox.templates import Templates
from sandbox.worker import WorkerClient, WorkerGoneError, result_of

__all__ = [
    "BRIDGE_PID",
    "FULL_BELOW_BYTES",
    "HOST_GUARD_S",
    "MARKER",
    "JanitorReport",
    "SandboxManager",
    "ThreadPredicate",
]

log = structlog.get_logger(__name__)

MARKER = ".sandbox-initialized"
# Group-writable: commands run as job uids in group 1000 and must be able to edit the seed.
# The egress bridge (127.0.0.1:3128 → the mounted proxy socket) runs once per container
# start, detached from this exec; then the workspace is seeded once.
BRIDGE_PID = "/tmp/egress-bridge.pid"  # noqa: S108 - the container's private /tmp
# The pid file is checked to name the bridge itself: a sandbox restored from a template has the
# template's /tmp, and that pid may be another process there (or none).
_START_BRIDGE = (
    f"if [ -d {MOUNT_POINT} ] && "
    f'! grep -qs egress-bridge "/proc/$(cat {BRIDGE_PID} 2>/dev/null)/cmdline"; then '
    f"setsid node {APP_DIR}/bin/egress-bridge.mjs </dev/null >/dev/null 2>&1 & "
    f"echo $! > {BRIDGE_PID}; fi; "
)
_INITIALISE = (
    _START_BRIDGE + f"[ -e {MARKER} ] && exit 0; umask 002; cp -R -n {APP_DIR}/seed/. . && "
    f"chmod -R g+w . && touch {MARKER}"
)
# A service sandbox is not seeded (n8n writes its own workspace and marker): its home is
# made group-writable once, for the job uids of its commands (group 1000), and the
# workspace directory n8n expects is there.
_INITIALISE_UNSEEDED = _START_BRIDGE + f"umask 002; chmod g+w . 2>/dev/null; mkdir -p {WORKSPACE}"

# Less room than this left after a failed command: the workspace was what ran out.
FULL_BELOW_BYTES = 1024 * 1024

# How much longer than an operation's own deadline the host waits for its answer: the sandbox
# enforces the deadline and reports, the host only guards against a stuck sandbox.
HOST_GUARD_S = 1.0
# A fresh compile or engine thread may first spend up to this loading its modules (ops.mjs
# LOAD_TIMEOUT_MS): not charged to the operation's deadline, so the host allows for it too.
THREAD_LOAD_S = 120.0
# The compile thread's deadline is its CPU time, which a busy sandbox may stretch on the clock up
# to this many times (ops.mjs BUSY_ALLOWANCE): the host waits that long for its operations.
CPU_DEADLINE_ALLOWANCE = 4
# The deadline of each of a pool sandbox's warm-up build and run (their threads' loads, ~2 s
# of CPU in all, are not charged to it; a busy machine stretches them).
WARM_TIMEOUT_S = 60.0

ThreadPredicate = Callable[[str], Awaitable[bool]]
# Commands block a thread each while they run (up to their deadline): they get threads of
# their own, made as needed, never the loop's default pool that engine calls share.
_COMMAND_THREADS = ThreadPoolExecutor(max_workers=1024, thread_name_prefix="sandbox-command")
T = TypeVar("T")


async def _never(_thread_id: str) -> bool:
    return False


async def _always(_thread_id: str) -> bool:
    return True


@dataclass(kw_only=True)
class _Entry:
    container: ContainerInfo
    last_used: float
    running_commands: int = 0
    worker: WorkerClient | None = None
    # A pool member's: what it was warmed for; once claimed, its claim in the readiness mix.
    readiness: Readiness | None = None
    claim: Claim | None = None

    def drop_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


@dataclass(frozen=True, kw_only=True)
class JanitorReport:
    removed_sandboxes: list[str] = field(default_factory=list)
    removed_volumes: list[str] = field(default_factory=list)
    removed_egress_dirs: list[str] = field(default_factory=list)


class SandboxManager:
    def __init__(
        self,
        provider: SandboxProvider,
        *,
        runner: CommandRunner | None = None,
        idle_ttl: timedelta = timedelta(minutes=15),
        ephemeral: bool = False,
        max_age: timedelta | None = None,
        is_busy: ThreadPredicate | None = None,
        thread_exists: ThreadPredicate | None = None,
        claimed_exists: ThreadPredicate | None = None,
        max_file_bytes: int = files.DEFAULT_MAX_FILE_BYTES,
        default_timeout_s: float = 300.0,
        use_worker: bool = True,
        pool_size: int = 0,
        egress: EgressProxy | None = None,
        reap_leftovers: bool = True,
        adopt_pool: bool = True,
    ) -> None:
        self.provider = provider
        self.engine = provider.engine
        # Whether a sandbox taken up by this process is cleared of commands still running
        # from a process that died: a service does it; a one-off command alongside does not.
        self.reap_leftovers = reap_leftovers
        # The proxy each claimed container reaches the outside through (None: no way out).
        self.egress = egress
        self.runner = runner or CommandRunner(provider.engine)
        self.idle_ttl = idle_ttl
        self.ephemeral = ephemeral
        self.max_age = max_age
        self.is_busy = is_busy or _never
        self.thread_exists = thread_exists or _always
        # Whether a sandbox claimed from the pool (no thread label: its id is in its name)
        # still belongs to someone; None: only the age limit removes such a sandbox.
        self.claimed_exists = claimed_exists
        self.max_file_bytes = max_file_bytes
        self.default_timeout_s = default_timeout_s
        self.use_worker = use_worker
        self.pool_size = pool_size
        self._entries: dict[str, _Entry] = {}
        self._creating: dict[str, asyncio.Future[ContainerInfo]] = {}
        # Started, seeded sandboxes (with their worker) waiting for a thread.
        self._pool: list[_Entry] = []
        # How many members are warmed with the engine: what claimed ones went on to use.
        self.readiness = ReadinessMix()
        self._refill: asyncio.Task[None] | None = None
        # Whether unclaimed pool sandboxes left by an earlier process are taken over (not
        # when other live services of the owner may be using theirs).
        self._adopted = not adopt_pool
        self._closing = False
        # Where the engine keeps snapshots (runsc): new sandboxes and pool members are restored
        # from a warm template (templates.py), made in the background at first need.
        self.templates: Templates | None = None
        if isinstance(self.engine, Snapshots) and use_worker:
            self.templates = Templates(
                self.engine.template_root, image=provider.image, kind=provider.kind
            )
        self._template_tasks: dict[Readiness, asyncio.Task[None]] = {}

    # -- acquisition --------------------------------------------------------------------

    @property
    def runs_image(self) -> bool:
        """Whether the image's programs (the SDK toolchain, the n8n engine, Chromium) run in
        these sandboxes (not in local ones)."""
        return self.engine.runs_image

    async def acquire(self, thread_id: str) -> ContainerInfo:
        """The thread's running, initialised sandbox container."""
        entry = self._entries.get(thread_id)
        # A live worker proves the container runs (its stream dies with it): no engine call.
        if entry is not None and (
            (entry.worker is not None and entry.worker.alive)
            or await _call(self.provider.still_running, entry.container)
        ):
            entry.last_used = time.monotonic()
            return entry.container
        if entry is not None:  # stopped or removed from outside: its worker went with it
            entry.drop_worker()
        pending = self._creating.get(thread_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[ContainerInfo] = asyncio.get_running_loop().create_future()
        self._creating[thread_id] = future
        try:
            new_entry = await self._claim_pooled(thread_id)
            if new_entry is None:
                template = self._template(self._next_readiness())
                container = await _call(self._prepare, thread_id, template)
                new_entry = _Entry(container=container, last_used=time.monotonic())
            await self._open_egress(thread_id, new_entry.container)
            self._entries[thread_id] = new_entry
            future.set_result(new_entry.container)
            return new_entry.container
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: other waiters re-raise it themselves
            raise
        finally:
            del self._creating[thread_id]

    async def _open_egress(self, thread_id: str, container: ContainerInfo) -> None:
        directory = self.provider.egress_dir(container)
        if self.egress is not None and directory is not None:
            await self.egress.listen(thread_id, directory)

    def _prepare(self, thread_id: str, template: Path | None = None) -> ContainerInfo:
        try:
            container, started_now = self.provider.ensure_started(thread_id, template)
        except RestoreFailedError as exc:
            self._restore_failed(template, exc)
            container, started_now = self.provider.ensure_started(thread_id)
        if self.reap_leftovers and not started_now:
            killed = self.runner.kill_leftovers(container.id)
            if killed:
                log.warning("killed commands left running", thread=thread_id, job_uids=killed)
        self._initialise(container)
        return container

    def _initialise(self, container: ContainerInfo) -> None:
        kind = self.provider.kind
        script = _INITIALISE if kind.seeded else _INITIALISE_UNSEEDED
        result = self.engine.exec(container.id, ["sh", "-c", script], workdir=kind.working_dir)
        if result.exit_code != 0:
            output = (result.stdout + result.stderr).decode(errors="replace")
            raise SandboxUnavailableError(f"initialising the workspace failed: {output}")

    async def state(self, thread_id: str) -> str | None:
        """The sandbox's container state (`running`, `exited`, ...; None when there is no
        container) without starting anything. The engine answers, never the worker's stream:
        under gVisor a killed container's stream can stay open a while, and a caller asking
        this is telling a crash from a running sandbox."""
        info = await _call(self.provider.get, thread_id)
        status = info.status if info is not None else None
        entry = self._entries.get(thread_id)
        if status != "running" and entry is not None:
            entry.drop_worker()  # it went with its container
        return status

    async def stop(self, thread_id: str) -> None:
        """Stop the sandbox, its files kept (an idle stop); the next use starts it again. An
        engine with snapshots suspends it instead: its processes and memory come back too."""
        entry = self._entries.pop(thread_id, None)
        if entry is not None:
            entry.drop_worker()  # the worker holds nothing of the host's once its channel ends
        info = await _call(self.provider.get, thread_id)
        if info is None or info.status != "running":
            return
        if isinstance(self.engine, Snapshots) and self.use_worker:
            try:
                await _call(self.engine.suspend, info.container_id)
                return
            except SandboxError as exc:
                log.warning("suspending a sandbox failed; stopping it", reason=str(exc))
        await _call(self.engine.kill, info.container_id)

    # -- the warm pool ------------------------------------------------------------------

    async def _claim_pooled(self, thread_id: str) -> _Entry | None:
        """A warm sandbox for a thread that has none yet (its own one always wins)."""
        if not self._pool or await _call(self.provider.get, thread_id) is not None:
            return None
        while self._pool:
            pooled = self._pool.pop(0)
            if not await _call(self.provider.still_running, pooled.container):
                # Stopped since it was warmed (an engine restart, a kill from outside).
                pooled.drop_worker()
                await _call(self.provider.discard, pooled.container)
                continue
            claimed = await _call(self.provider.claim, thread_id, pooled.container)
            if claimed is not None:
                pooled.container = claimed
                pooled.last_used = time.monotonic()
                pooled.claim = self.readiness.claimed()
                self.refill_pool()
                return pooled
            pooled.drop_worker()  # another process claimed it
        self.refill_pool()
        return None

    def refill_pool(self) -> None:
        """Top the pool up in the background (one refill at a time)."""
        if self._closing:
            return
        if self.pool_size > 0 and (self._refill is None or self._refill.done()):
            self._refill = asyncio.create_task(self.fill_pool(), name="sandbox-pool-refill")

    async def fill_pool(self) -> None:
        """Bring the pool to `pool_size`, adopting unclaimed pool sandboxes of the current
        image left by an earlier process before creating new ones."""
        if not self._adopted:
            self._adopted = True
            for container in await _call(self.provider.pooled):
                stale = container.labels.get(LABEL_IMAGE) != self.provider.image
                foreign = not self.provider.fits(container)
                if stale or foreign or len(self._pool) >= self.pool_size:
                    # Another image, another process layout (its egress directory is not
                    # ours) or runtime, or one too many: nobody's files are in it.
                    await _call(self.provider.discard, container)
                    continue
                await self._add_to_pool(container)
        while len(self._pool) < self.pool_size and not self._closing:
            readiness = self._next_readiness()
            template = self._template(readiness)
            try:
                container = await _call(self.provider.create_pooled, template)
            except RestoreFailedError as exc:
                self._restore_failed(template, exc)
                container, template = await _call(self.provider.start, exc.container), None
            if not await self._add_to_pool(container, readiness, warm=template is None):
                return  # the next claim tries the refill again

    def _next_readiness(self) -> Readiness:
        """What the next sandbox is warmed for, as the traffic needs (readiness.py)."""
        return self.readiness.next_member(
            pool_size=max(self.pool_size, 1),
            ready_to_verify=sum(e.readiness == Readiness.VERIFY for e in self._pool),
        )

    async def _add_to_pool(
        self, container: ContainerInfo, readiness: Readiness | None = None, *, warm: bool = True
    ) -> bool:
        """Warm `container` into the pool (unless restored warm: `warm` false), as ready as
        the traffic needs; one that does not get ready is discarded."""
        readiness = readiness or self._next_readiness()
        try:
            self._pool.append(await _call(self._warm, container, readiness, warm))
        except SandboxError as exc:
            log.warning("discarding a pool sandbox that did not get ready", reason=str(exc))
            await _call(self.provider.discard, container)
            return False
        return True

    def _warm(self, container: ContainerInfo, readiness: Readiness, warm: bool = True) -> _Entry:
        """A pool member ready to work: started, initialised, and (with the image) its worker
        running with the compiler loaded by one warm-up build and, ready to verify, the
        engine by a warm-up run, so a thread's first build (and verification) cost what warm
        ones do. One restored from a warm template (`warm` false) needs no warm-up."""
        if container.status != "running":
            container = self.provider.start(container)
        self._initialise(container)
        worker = WorkerClient.start(self.engine, container.id) if self.use_worker else None
        if worker is not None and warm and self.runs_image and self.provider.kind.warm_toolchain:
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
        return _Entry(
            container=container, last_used=time.monotonic(), worker=worker, readiness=readiness
        )

    # -- templates (engines with snapshots) ---------------------------------------------

    def _template(self, readiness: Readiness) -> Path | None:
        """The template new sandboxes of this readiness are restored from; None (a cold
        start) until it is made, which starts in the background now."""
        if self.templates is None:
            return None
        found = self.templates.ready(readiness)
        if found is None and not self._closing:
            task = self._template_tasks.get(readiness)
            if task is None or task.done():
                self._template_tasks[readiness] = asyncio.create_task(
                    _call(self._make_template, readiness), name=f"sandbox-template-{readiness}"
                )
        return found

    def _make_template(self, readiness: Readiness) -> None:
        """Warm a sandbox made cold, close its worker's channel (the worker then holds
        nothing of the host's), checkpoint it as the template, remove it."""
        assert self.templates is not None and isinstance(self.engine, Snapshots)
        engine = self.engine
        container = self.provider.create_pooled()
        try:
            entry = self._warm(container, readiness)
            entry.drop_worker()
            self.templates.save(
                readiness, lambda path: engine.checkpoint(container.id, path, leave_running=False)
            )
        except SandboxError as exc:
            log.warning("making a sandbox template failed", readiness=readiness, reason=str(exc))
        finally:
            self.provider.discard(container)

    def _restore_failed(self, template: Path | None, exc: RestoreFailedError) -> None:
        """A restore that failed: counted, logged, its template made again at the next need
        (the sandbox is then started cold)."""
        assert self.templates is not None and template is not None
        log.warning("restoring a sandbox failed; starting it cold", reason=str(exc))
        self.templates.discard(template)

    def pooled_count(self) -> int:
        return len(self._pool)

    # -- operations ---------------------------------------------------------------------

    async def run_command(
        self,
        thread_id: str,
        command: str,
        *,
        timeout_s: float | None = None,
        cwd: str | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> CommandResult:
        """Run a command under a deadline, in `cwd` (relative to the workspace) or `workdir`
        (any directory of the sandbox: a service sandbox's caller may name one). Cancelling
        the awaiting task kills its tree."""
        directory = posixpath.join(WORKSPACE, files.confine(cwd)) if cwd else WORKSPACE
        directory = workdir or directory
        container = await self.acquire(thread_id)
        entry = self._entries[thread_id]
        cancel = threading.Event()
        entry.running_commands += 1
        try:
            run = functools.partial(
                self.runner.run,
                container.id,
                command,
                timeout_s=timeout_s or self.default_timeout_s,
                cwd=directory,
                env=env,
                cancel=cancel,
                on_output=on_output,
                job_processes=self._job_counter(entry),
                job_limits=self.provider.job_limits,
            )
            # A thread of its own for as long as the command runs: in the loop's default
            # pool (cpu + 4 threads) a few long commands would hold up every engine call.
            task = asyncio.ensure_future(
                asyncio.get_running_loop().run_in_executor(_COMMAND_THREADS, run)
            )
            try:
                result = await asyncio.shield(task)
            except asyncio.CancelledError:
                cancel.set()
                with contextlib.suppress(Exception):
                    await task  # the tree is dead once this returns
                raise
        finally:
            entry.running_commands -= 1
            entry.last_used = time.monotonic()
        return await self._say_when_full(container, result)

    @staticmethod
    def _job_counter(entry: _Entry) -> JobCounter | None:
        """Asks the sandbox's worker how many processes a job has left (None: no worker)."""
        worker = entry.worker
        if worker is None or not worker.alive:
            return None

        def count(uid: int) -> int | None:
            found = worker.call("jobProcesses", timeout_s=5.0, uid=uid)
            return int(found["count"]) if isinstance(found, dict) else None

        return count

    async def _say_when_full(
        self, container: ContainerInfo, result: CommandResult
    ) -> CommandResult:
        """A command that failed on a full workspace says so, with the limit to mind."""
        if result.exit_code == 0 or self.provider.disks is None:
            return result
        free = await _call(self.provider.workspace_free_bytes, container)
        if free is None or free > FULL_BELOW_BYTES:
            return result
        note = f"\n[instance-ai] {self.full_message()}\n"
        return dataclasses.replace(result, stderr=result.stderr + note)

    def full_message(self) -> str:
        limit = self.provider.disks.size_mib if self.provider.disks else 0
        return (
            f"the workspace is full: it holds at most {limit} MiB "
            "(INSTANCE_AI_SANDBOX_WORKSPACE_MAX_MB); delete files to go on"
        )

    async def read_file(self, thread_id: str, path: str) -> bytes:
        limit = self.max_file_bytes
        return await self._file_op(
            thread_id,
            lambda w: w.read_file(path, max_bytes=limit),
            lambda c: files.read_file(c, path, max_bytes=limit),
        )

    async def read_result(self, thread_id: str, path: str) -> bytes:
        """A stored result: bounded by what a command may save, not by the edit cap."""
        limit = max(self.max_file_bytes, self.runner.max_saved_bytes)
        return await self._file_op(
            thread_id,
            lambda w: w.read_file(path, max_bytes=limit),
            lambda c: files.read_file(c, path, max_bytes=limit),
        )

    async def write_file(self, thread_id: str, path: str, data: bytes) -> int:
        files.confine(path)  # refuse before creating a sandbox for a bad request
        limit = self.max_file_bytes
        return await self._file_op(
            thread_id,
            lambda w: w.write_file(path, data, max_bytes=limit),
            lambda c: files.write_file(c, path, data, max_bytes=limit),
        )

    async def str_replace(
        self, thread_id: str, path: str, old: str, new: str, *, replace_all: bool = False
    ) -> int:
        limit = self.max_file_bytes
        return await self._file_op(
            thread_id,
            lambda w: w.str_replace(path, old, new, replace_all=replace_all, max_bytes=limit),
            lambda c: files.str_replace(
                c, path, old, new, replace_all=replace_all, max_bytes=limit
            ),
        )

    async def list_files(
        self, thread_id: str, path: str = ".", *, recursive: bool = False
    ) -> tuple[list[files.FileEntry], bool]:
        limit = files.DEFAULT_MAX_ENTRIES
        return await self._file_op(
            thread_id,
            lambda w: w.list_files(path, recursive=recursive, max_entries=limit),
            lambda c: files.list_files(c, path, recursive=recursive, max_entries=limit),
        )

    async def grep(self, thread_id: str, query: GrepQuery) -> GrepResult:
        confined = dataclasses.replace(query, path=files.confine(query.path))
        return await self._file_op(
            thread_id, lambda w: w.grep(confined), lambda c: files.grep(c, confined)
        )

    async def compile(
        self, thread_id: str, path: str, *, timeout_s: float = 5.0, max_bytes: int | None = None
    ) -> dict[str, Any]:
        """Compile and validate a `.workflow.ts` (or WorkflowJSON) source with the SDK in the
        sandbox: `{ok, workflow, fixtures, issues, sourceHash, typed}`, or `{ok: False, stage,
        message}` (load, export or timeout). A failed build is data, not an error."""
        return await self._source_operation("compile", thread_id, path, timeout_s, max_bytes)

    async def diagnose(
        self, thread_id: str, path: str, *, timeout_s: float = 5.0
    ) -> dict[str, Any]:
        """TypeScript diagnostics for one source and its imports, with the workspace's
        tsconfig: `{ok, diagnostics: [{file, line, column, code, message}]}` or
        `{ok: False, message}` when the check itself failed or ran out of time."""
        return await self._source_operation("diagnose", thread_id, path, timeout_s, None)

    async def _source_operation(
        self, op: str, thread_id: str, path: str, timeout_s: float, max_bytes: int | None
    ) -> dict[str, Any]:
        files.confine(path)
        return dict(
            await self.operation(
                thread_id,
                op,
                timeout_s=timeout_s * CPU_DEADLINE_ALLOWANCE,
                path=path,
                timeoutMs=int(timeout_s * 1000),
                maxBytes=max_bytes or self.max_file_bytes,
            )
        )

    async def workflow_to_code(
        self, thread_id: str, workflow: dict[str, Any], *, timeout_s: float = 5.0
    ) -> dict[str, Any]:
        """WorkflowJSON as SDK TypeScript: `{ok, code}` or `{ok: False, stage, message}`."""
        return dict(
            await self.operation(
                thread_id,
                "toCode",
                timeout_s=timeout_s * CPU_DEADLINE_ALLOWANCE,
                workflow=workflow,
                timeoutMs=int(timeout_s * 1000),
            )
        )

    async def node_definition(
        self,
        thread_id: str,
        node_type: str,
        version: float,
        *,
        resource: str | None = None,
        operation: str | None = None,
        mode: str | None = None,
    ) -> dict[str, Any]:
        """The TypeScript parameter types of one node version (of one resource/operation or
        mode when the node is split by them): `{file, content, discriminators}`."""
        return dict(
            await self.operation(
                thread_id,
                "definition",
                nodeType=node_type,
                version=version,
                resource=resource,
                operation=operation,
                mode=mode,
            )
        )

    async def materialize_node_type(
        self,
        thread_id: str,
        node_type: str,
        version: float,
        *,
        description: dict[str, Any] | None = None,
        resource: str | None = None,
        operation: str | None = None,
        mode: str | None = None,
    ) -> dict[str, Any]:
        """Write one node version's typed parameters into the workspace (`node-types/...`):
        the image's files (a split node's whole folder), or generated from `description`
        (the catalog's entry) when the image has none. `{path, content, source:
        image|generated, files}`; `content` is the file of the resource/operation or mode
        asked about, else the main one."""
        return dict(
            await self.operation(
                thread_id,
                "materialize",
                timeout_s=30.0,
                nodeType=node_type,
                version=version,
                description=description,
                resource=resource,
                operation=operation,
                mode=mode,
                maxBytes=self.max_file_bytes,
            )
        )

    async def execute(
        self,
        thread_id: str,
        workflow: dict[str, Any],
        *,
        execution_id: str,
        pin_data: dict[str, list[Any]] | None = None,
        start_node: str | None = None,
        timeout_s: float = 300.0,
        credentials: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Run a WorkflowJSON on the n8n engine in the sandbox, nodes in `pin_data` replaced by
        their items: `{ok, status, order, nodes: {name: {status, outputs, error, pinned}},
        ...}`, or `{ok: False, stage, message}` when it could not finish (timeout, memory).
        `credentials` (id → {type, data}) are what a live run's nodes may use."""
        return dict(
            await self.operation(
                thread_id,
                "execute",
                timeout_s=timeout_s,
                executionId=execution_id,
                workflow=workflow,
                pinData=pin_data or {},
                startNode=start_node,
                credentials=credentials or {},
                timeoutMs=int(timeout_s * 1000),
            )
        )

    async def node_resources(
        self,
        thread_id: str,
        node: dict[str, Any],
        *,
        lookup: str,
        method: str,
        credentials: dict[str, dict[str, Any]],
        filter_text: str | None = None,
        pagination_token: str | None = None,
        timeout_s: float = 30.0,
    ) -> dict[str, Any]:
        """Run a node type's listSearch / loadOptions method in the sandbox with the given
        credential data (its requests go out through the egress proxy): `{ok, value}` or
        `{ok: False, stage, message}`."""
        return dict(
            await self.operation(
                thread_id,
                "nodeResources",
                timeout_s=timeout_s,
                node=node,
                lookup=lookup,
                method=method,
                credentials=credentials,
                filter=filter_text,
                paginationToken=pagination_token,
                timeoutMs=int(timeout_s * 1000),
            )
        )

    async def resolve_parameters(
        self,
        thread_id: str,
        workflow: dict[str, Any],
        *,
        nodes: dict[str, Any],
        node_name: str,
        execution_id: str,
        mode: str = "manual",
        run_index: int | None = None,
        item_index: int = 0,
        timeout_s: float = 30.0,
    ) -> dict[str, Any]:
        """A node's parameters with each expression evaluated by the engine against a past run
        (`nodes`: the run's record, each node's `outputs` and `runs`): `{ok, nodeName,
        runIndex, itemIndex, parameters, resolved, failedExpressions, emptyResolutions}`, or
        `{ok: False, stage, message}`."""
        return dict(
            await self.operation(
                thread_id,
                "resolveParameters",
                timeout_s=timeout_s,
                workflow=workflow,
                nodes=nodes,
                nodeName=node_name,
                runIndex=run_index,
                itemIndex=item_index,
                executionId=execution_id,
                mode=mode,
                timeoutMs=int(timeout_s * 1000),
            )
        )

    async def output_schema(
        self,
        thread_id: str,
        node_type: str,
        version: float,
        *,
        resource: str | None = None,
        operation: str | None = None,
    ) -> dict[str, Any] | None:
        """The JSON Schema n8n-nodes-base ships for a node version's output (for one
        resource/operation), or None when it ships none."""
        found = await self.operation(
            thread_id,
            "outputSchema",
            nodeType=node_type,
            version=version,
            resource=resource,
            operation=operation,
        )
        schema = found.get("schema")
        return dict(schema) if isinstance(schema, dict) else None

    async def cancel_execution(self, thread_id: str, execution_id: str) -> None:
        """Ask a run in progress to stop after its current node."""
        await self.operation(thread_id, "cancelExecution", executionId=execution_id)

    async def operation(
        self, thread_id: str, op: str, *, timeout_s: float = 10.0, **args: Any
    ) -> Any:
        """One operation of the in-sandbox `ops.mjs`, on the worker or, without one, in a
        one-shot `run-op.mjs` process. `timeout_s` is the operation's own deadline; the host
        waits a little longer, since the sandbox enforces it and reports."""
        if not self.runs_image:
            raise SandboxUnavailableError(
                "building and running workflows needs the sandbox image: use Docker sandboxes "
                "(INSTANCE_AI_SANDBOX_PROVIDER=docker)"
            )
        try:
            return await self._file_op(
                thread_id,
                lambda w: w.call(op, timeout_s=timeout_s + THREAD_LOAD_S + HOST_GUARD_S, **args),
                lambda workspace: self._run_op(workspace, {"op": op, **args}),
            )
        finally:
            entry = self._entries.get(thread_id)
            if op in ENGINE_OPS and entry is not None and entry.claim is not None:
                entry.claim.used_engine = True  # what the pool's next members are warmed for

    @staticmethod
    def _run_op(workspace: files.Workspace, request: dict[str, Any]) -> Any:
        result = workspace.engine.exec(
            workspace.container_id,
            ["node", f"{APP_DIR}/bin/run-op.mjs", json.dumps(request)],
            workdir=WORKSPACE,
        )
        lines = result.stdout.strip().splitlines()
        if not lines:
            detail = result.stderr.decode(errors="replace")[-2000:]
            raise SandboxUnavailableError(f"the sandbox operation {request['op']} died: {detail}")
        return result_of(json.loads(lines[-1]))

    async def _file_op(
        self,
        thread_id: str,
        through_worker: Callable[[WorkerClient], T],
        through_exec: Callable[[files.Workspace], T],
    ) -> T:
        """Run a file operation on the worker, restarting a dead one once; when no worker
        can run, the exec path serves the call (slower, same rules). Each attempt acquires
        the sandbox again: a worker that died may have died with its container."""
        for _attempt in range(2):
            container = await self.acquire(thread_id)
            entry = self._entries[thread_id]
            if not self.use_worker:
                break
            if entry.worker is None or not entry.worker.alive:
                entry.drop_worker()
                try:
                    entry.worker = await _call(WorkerClient.start, self.engine, container.id)
                except WorkerGoneError as exc:
                    log.warning("sandbox worker unavailable; using exec", reason=str(exc))
                    break
            try:
                return await _call(through_worker, entry.worker)
            except WorkerGoneError:
                entry.drop_worker()
            except WorkspaceFullError as exc:
                raise WorkspaceFullError(f"{exc}: {self.full_message()}") from None
        container = await self.acquire(thread_id)
        return await _call(through_exec, files.Workspace(self.engine, container.id))

    # -- the headless browser -----------------------------------------------------------

    async def open_browser(self, thread_id: str) -> ProcessStream:
        """Start Chromium in the thread's sandbox, its CDP pipe on the stream's stdin and
        stdout (see image/browser.py). Its pages reach the outside only through the thread's
        egress proxy, when the service has one; without one they reach nothing beyond the
        sandbox (files in the workspace, servers on its loopback)."""
        if not self.runs_image:
            raise SandboxUnavailableError(
                "the sandboxed browser runs in a Docker sandbox (INSTANCE_AI_SANDBOX_PROVIDER="
                "docker)"
            )
        container = await self.acquire(thread_id)
        has_egress = self.egress is not None and self.provider.egress_dir(container) is not None
        return await ProcessStream.open(
            self.engine,
            container.id,
            browser_command(f"127.0.0.1:{BRIDGE_PORT}" if has_egress else None),
            workdir=WORKSPACE,
            environment=BROWSER_ENVIRONMENT,
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def destroy(self, thread_id: str) -> bool:
        """Remove the thread's sandbox and workspace (thread deletion)."""
        entry = self._entries.pop(thread_id, None)
        if entry is not None:
            entry.drop_worker()
        if self.egress is not None:
            await self.egress.stop(thread_id)
        return await _call(self.provider.destroy, thread_id)

    def cached_threads(self) -> list[str]:
        return list(self._entries)

    async def sweep_idle(self) -> list[str]:
        """Drop (or, ephemeral, destroy) idle sandboxes that nothing is using. On an engine
        with snapshots an idle sandbox is suspended: it then costs no CPU and no memory until
        its next use restores it."""
        now = time.monotonic()
        swept = []
        for thread_id, entry in list(self._entries.items()):
            idle = now - entry.last_used >= self.idle_ttl.total_seconds()
            if not idle or entry.running_commands or await self.is_busy(thread_id):
                continue
            if self.ephemeral:
                await self.destroy(thread_id)
            elif isinstance(self.engine, Snapshots) and self.use_worker:
                await self.stop(thread_id)
            else:
                self._entries.pop(thread_id).drop_worker()
            swept.append(thread_id)
        return swept

    async def reap_all(self) -> dict[str, list[int]]:
        """Kill commands left running by a process that died, in every running sandbox of
        this owner that this process has not taken up yet (start-up: their deadlines died
        with the process that enforced them). Thread id → job uids that had processes."""
        reaped: dict[str, list[int]] = {}
        for info in await _call(self.provider.list_sandboxes):
            if info.status != "running" or info.thread_id in self._entries:
                continue
            try:
                killed = await _call(self.runner.kill_leftovers, info.container_id)
            except SandboxError as exc:  # removed meanwhile, or the engine went away
                log.warning("could not clear a sandbox", sandbox=info.sandbox_id, error=str(exc))
                continue
            if killed:
                reaped[info.thread_id or info.sandbox_id] = killed
        if reaped:
            log.warning("killed commands left running by a stopped process", sandboxes=reaped)
        return reaped

    async def janitor(self) -> JanitorReport:
        """One pass: remove sandboxes of vanished threads, expired sandboxes, orphaned
        workspace volumes of this owner and egress directories no container names."""
        report = JanitorReport()
        for info in await _call(self.provider.list_sandboxes):
            if await self._should_remove(info):
                entry = self._entries.pop(info.thread_id, None) if info.thread_id else None
                if entry is not None:
                    entry.drop_worker()
                await _call(self.provider.remove, info)
                report.removed_sandboxes.append(info.thread_id or info.sandbox_id)
        for volume in await _call(self.provider.orphan_volumes):
            await _call(self.provider.remove_volume, volume)
            report.removed_volumes.append(volume)
        report.removed_egress_dirs.extend(await _call(self.provider.orphan_egress_dirs))
        await _call(self.provider.remove_egress_dirs, report.removed_egress_dirs)
        if report.removed_sandboxes or report.removed_volumes or report.removed_egress_dirs:
            log.info("sandbox janitor", **report.__dict__)
        return report

    async def _should_remove(self, info: SandboxInfo) -> bool:
        entry = self._entries.get(info.thread_id)
        if entry is not None and entry.running_commands:
            return False
        # A claimed pool sandbox has no thread label (labels are fixed at creation): its
        # name's sandbox id is asked about instead, where the owner of ids can answer.
        if info.thread_id and not await self.thread_exists(info.thread_id):
            return True
        claimed_exists = self.claimed_exists
        if not info.thread_id and claimed_exists and not await claimed_exists(info.sandbox_id):
            return True
        if self.max_age is None or info.created_at is None:
            return False
        expired = datetime.now(UTC) - info.created_at > self.max_age
        return expired and not await self.is_busy(info.thread_id)

    async def close(self) -> None:
        """Ephemeral sandboxes go with the process; others (and the pool) stay for the next
        start."""
        self._closing = True
        if self._refill is not None:
            # Not cancelled: that would stop the waiting, not the engine call in its thread,
            # which would then finish after everything else was torn down. The loop stops
            # at the next sandbox instead.
            with contextlib.suppress(SandboxError):
                await self._refill
        for task in self._template_tasks.values():
            with contextlib.suppress(SandboxError):
                await task
        for pooled in self._pool:
            pooled.drop_worker()
            if self.ephemeral:
                await _call(self.provider.discard, pooled.container)
        self._pool.clear()
        if self.ephemeral:
            for thread_id in list(self._entries):
                await self.destroy(thread_id)
        for entry in self._entries.values():
            entry.drop_worker()
        self._entries.clear()
        if self.egress is not None:
            await self.egress.close()
        await _call(self.provider.close)


async def _call(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking engine call in a worker thread (the engine translates its own faults
    into SandboxUnavailableError)."""
    return await asyncio.to_thread(function, *args, **kwargs)
