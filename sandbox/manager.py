"""The thread-scoped sandbox manager: the one object the rest of the service talks to.

- **Lazy and single-flight**: a thread's sandbox is found or created on first use; concurrent
  first uses of one thread share one creation. It comes from the warm pool when one waits there,
  restored from a template where the engine has snapshots, else started cold (pool.py).
- **Initialised once**: the workspace is seeded once (workspace_seed.py), so a restart or a
  reattach keeps the user's files.
- **Self-healing**: a container stopped or removed from outside is started or recreated on
  next use (the workspace volume survives).
- **Commands and files**: commands under a deadline, each in a job of its own (commands.py);
  file operations and the toolchain's calls (toolchain.py: `toolchain(thread_id)`, a handle
  bound to the thread) on the sandbox's worker, with a one-shot exec when no worker can run.
- **Housekeeping** (housekeeping.py): the idle sweep, the reaper of leftover commands, the
  janitor.
- **Stopping**: `close` leaves sandboxes and the pool for the next process (a one-off command
  alongside a service); `shutdown`, the service's own stop, leaves nothing of it running.

It works against the container-engine seam (`engine.py`) through `SandboxProvider`: Docker,
runsc itself, or local directories (no isolation). Engine calls block, so each runs in a worker
thread.
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
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import structlog

from sandbox import files, housekeeping
from sandbox.blocking import in_thread
from sandbox.commands import CommandResult, CommandRunner, JobCounter, OutputCallback
from sandbox.egress import BRIDGE_PORT, EgressProxy
from sandbox.engine import ContainerInfo, Snapshots, WorkerHost
from sandbox.entries import SandboxEntry
from sandbox.errors import SandboxError, SandboxUnavailableError, WorkspaceFullError
from sandbox.housekeeping import JanitorReport
from sandbox.image.browser import BROWSER_ENVIRONMENT, browser_command
from sandbox.image.rootfs import APP_DIR, WORKSPACE
from sandbox.pool import DEMAND_WINDOW_S, WarmPool
from sandbox.provider import RestoreFailedError, SandboxProvider, Started
from sandbox.readiness import ENGINE_OPS
from sandbox.search import GrepQuery, GrepResult
from sandbox.streams import ProcessStream
from sandbox.toolchain import ThreadToolchain
from sandbox.worker import HOST_GUARD_S, THREAD_LOAD_S, WorkerClient, WorkerGoneError, result_of
from sandbox.workspace_seed import MARKER, initialise

__all__ = [
    "FULL_BELOW_BYTES",
    "MARKER",
    "JanitorReport",
    "SandboxManager",
    "ThreadPredicate",
]

log = structlog.get_logger(__name__)

# Less room than this left after a failed command: the workspace was what ran out.
FULL_BELOW_BYTES = 1024 * 1024

ThreadPredicate = Callable[[str], Awaitable[bool]]
# Commands block a thread each while they run (up to their deadline): they get threads of
# their own, made as needed, never the loop's default pool that engine calls share.
_COMMAND_THREADS = ThreadPoolExecutor(max_workers=1024, thread_name_prefix="sandbox-command")
T = TypeVar("T")


async def _never(_thread_id: str) -> bool:
    return False


async def _always(_thread_id: str) -> bool:
    return True


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
        pool_window: timedelta = timedelta(seconds=DEMAND_WINDOW_S),
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
        self.entries: dict[str, SandboxEntry] = {}
        self._creating: dict[str, asyncio.Future[ContainerInfo]] = {}
        self.pool = WarmPool(
            provider,
            size=pool_size,
            use_worker=use_worker,
            adopt=adopt_pool,
            demand_window_s=pool_window.total_seconds(),
        )

    # -- acquisition --------------------------------------------------------------------

    @property
    def runs_image(self) -> bool:
        """Whether the image's programs (the SDK toolchain, the n8n engine, Chromium) run in
        these sandboxes (not in local ones)."""
        return self.engine.runs_image

    def toolchain(self, thread_id: str) -> ThreadToolchain:
        """The workflow SDK's and the n8n engine's calls in the thread's sandbox (where
        `runs_image`), bound to the thread."""
        return ThreadToolchain(self, thread_id)

    async def acquire(self, thread_id: str) -> ContainerInfo:
        """The thread's running, initialised sandbox container."""
        entry = self.entries.get(thread_id)
        # A live worker proves the container runs (its stream dies with it): no engine call.
        if entry is not None and (
            (entry.worker is not None and entry.worker.alive)
            or await in_thread(self.provider.still_running, entry.container)
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
            new_entry = await self.pool.claim(thread_id)
            if new_entry is None:
                template = self.pool.template(self.pool.next_readiness())
                container = await in_thread(self._prepare, thread_id, template)
                new_entry = SandboxEntry(container=container, last_used=time.monotonic())
            await self._open_egress(thread_id, new_entry.container)
            self.entries[thread_id] = new_entry
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
            container, started = self.provider.ensure_started(thread_id, template)
        except RestoreFailedError as exc:
            self.pool.restore_failed(template, exc)
            container, started = self.provider.ensure_started(thread_id)
        if self.reap_leftovers and started is Started.RUNNING:
            killed = self.runner.kill_leftovers(container.id)
            if killed:
                log.warning("killed commands left running", thread=thread_id, job_uids=killed)
        # A resumed sandbox is as it was when suspended, initialised: its bridge runs, its
        # workspace is seeded (an exec right after a restore costs ~120 ms under gVisor).
        if started is not Started.RESUMED:
            initialise(self.engine, self.provider.kind, container)
        return container

    async def state(self, thread_id: str) -> str | None:
        """The sandbox's container state (`running`, `exited`, ...; None when there is no
        container) without starting anything. The engine answers, never the worker's stream:
        under gVisor a killed container's stream can stay open a while, and a caller asking
        this is telling a crash from a running sandbox."""
        info = await in_thread(self.provider.get, thread_id)
        status = info.status if info is not None else None
        entry = self.entries.get(thread_id)
        if status != "running" and entry is not None:
            entry.drop_worker()  # it went with its container
        return status

    async def stop(self, thread_id: str) -> None:
        """Stop the sandbox, its files kept (an idle stop); the next use starts it again. An
        engine with snapshots suspends it instead: its processes and memory come back too."""
        entry = self.entries.pop(thread_id, None)
        if entry is not None:
            # The worker holds nothing of the host's once its channel ends.
            await entry.let_go_of_worker()
        info = await in_thread(self.provider.get, thread_id)
        if info is not None and info.status == "running":
            await self._let_go(info.container_id)

    async def _let_go(self, container_id: str) -> None:
        """Suspend a running sandbox (an engine with snapshots: its processes and memory come
        back at the next start) or stop it (its files kept)."""
        if isinstance(self.engine, Snapshots) and self.use_worker:
            try:
                await in_thread(self.engine.suspend, container_id)
                return
            except SandboxError as exc:
                log.warning("suspending a sandbox failed; stopping it", reason=str(exc))
        await in_thread(self.engine.kill, container_id)

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
        entry = self.entries[thread_id]
        if (
            isinstance(self.engine, WorkerHost)
            and self.use_worker
            and not (entry.worker is not None and entry.worker.alive)
            and (entry.connecting is None or entry.connecting.done())
        ):
            # The worker runs there anyway (the main process): asked how many processes a
            # command left, it spares the kill script after most commands. Connected beside
            # the command (after a resume that takes ~15 ms), not before it.
            entry.connecting = asyncio.ensure_future(self._connect_worker(entry, container))
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

    def _job_counter(self, entry: SandboxEntry) -> JobCounter | None:
        """Asks the sandbox's worker how many processes a job has left (None: it has no
        worker; the count None: no worker is connected when the command ends)."""
        if not self.use_worker or not self.engine.runs_image:
            return None

        def count(uid: int) -> int | None:
            worker = entry.worker  # as it is when the command ends
            if worker is None or not worker.alive:
                return None
            found = worker.call("jobProcesses", timeout_s=5.0, uid=uid)
            return int(found["count"]) if isinstance(found, dict) else None

        return count

    async def _say_when_full(
        self, container: ContainerInfo, result: CommandResult
    ) -> CommandResult:
        """A command that failed on a full workspace says so, with the limit to mind."""
        if result.exit_code == 0 or self.provider.disks is None:
            return result
        free = await in_thread(self.provider.workspace_free_bytes, container)
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
            entry = self.entries.get(thread_id)
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
            entry = self.entries[thread_id]
            if not self.use_worker:
                break
            try:
                worker = await self._start_worker(entry, container)
            except WorkerGoneError as exc:
                log.warning("sandbox worker unavailable; using exec", reason=str(exc))
                break
            try:
                return await in_thread(through_worker, worker)
            except WorkerGoneError:
                entry.drop_worker()
            except WorkspaceFullError as exc:
                raise WorkspaceFullError(f"{exc}: {self.full_message()}") from None
        for attempt in range(2):
            container = await self.acquire(thread_id)
            try:
                return await in_thread(through_exec, files.Workspace(self.engine, container.id))
            except SandboxUnavailableError:
                # The sandbox may have ended under the call: a killed worker takes a gVisor
                # sandbox with it, whose state says running a moment longer, so the acquire
                # above took it as it ended. Stopped, it is started again (the workspace as
                # it was), once; removed, it stays an error.
                if attempt or await self.state(thread_id) in (None, "running"):
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _start_worker(self, entry: SandboxEntry, container: ContainerInfo) -> WorkerClient:
        """The sandbox's worker, started (or reconnected) unless it is alive."""
        async with entry.worker_lock:
            if entry.worker is None or not entry.worker.alive:
                entry.drop_worker()
                entry.worker = await in_thread(WorkerClient.start, self.engine, container.id)
            return entry.worker

    async def _connect_worker(self, entry: SandboxEntry, container: ContainerInfo) -> None:
        """`_start_worker` for whoever uses the worker next; a worker that cannot start now
        is started again at its next use."""
        with contextlib.suppress(SandboxError):
            await self._start_worker(entry, container)

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
        entry = self.entries.pop(thread_id, None)
        if entry is not None:
            entry.drop_worker()
        if self.egress is not None:
            await self.egress.stop(thread_id)
        return await in_thread(self.provider.destroy, thread_id)

    def cached_threads(self) -> list[str]:
        return list(self.entries)

    async def sweep_idle(self) -> list[str]:
        """Let go of idle sandboxes (housekeeping.py) and of pool members no claim needs."""
        await self.pool.trim()
        return await housekeeping.sweep_idle(self)

    async def reap_all(self) -> dict[str, list[int]]:
        return await housekeeping.reap_all(self)

    async def janitor(self) -> JanitorReport:
        return await housekeeping.janitor(self)

    async def close(self) -> None:
        """Let go of everything this process holds: ephemeral sandboxes go with it; others
        (and the pool) stay, running, for the next process (a one-off command alongside a
        service closes this way)."""
        await self.pool.close(discard=self.ephemeral)
        if self.ephemeral:
            for thread_id in list(self.entries):
                await self.destroy(thread_id)
        for entry in self.entries.values():
            entry.drop_worker()
        self.entries.clear()
        if self.egress is not None:
            await self.egress.close()
        await in_thread(self.provider.close)

    async def shutdown(self) -> None:
        """The service stops (SIGTERM): nothing of it keeps running. Pool members are
        removed; sandboxes that hold a user's state are suspended where the engine has
        snapshots, else stopped, their files kept, and taken up again at their next use. Alone
        (no other live process of the owner), that is every running sandbox of the owner; else
        the ones this process holds (another's may be in use)."""
        if not self.ephemeral:
            await self.pool.close(discard=True)
            held = set(self.entries)
            for thread_id in held:
                await self._stop_quietly(self.stop(thread_id))
            if self.reap_leftovers:
                for info in await in_thread(self.provider.list_sandboxes):
                    if info.status == "running" and info.thread_id not in held:
                        await self._stop_quietly(self._let_go(info.container_id))
                for pooled in await in_thread(self.provider.pooled):
                    await self._stop_quietly(in_thread(self.provider.discard, pooled))
        await self.close()

    @staticmethod
    async def _stop_quietly(stopping: Awaitable[None]) -> None:
        """One sandbox's part of a shutdown: its failure is logged, the rest go on."""
        try:
            await stopping
        except SandboxError as exc:
            log.warning("stopping a sandbox at shutdown failed", reason=str(exc))
