"""The container-engine seam: the few things the sandbox manager asks of an engine, as a
protocol over plain values. Docker (`docker_engine.py`) is one implementation; local
directories and subprocesses (`local_engine.py`, no isolation) are another. No engine SDK
type crosses it.

Every call blocks (async callers run them in a worker thread). An engine that cannot answer
raises `SandboxUnavailableError` with what to check; a container or process that vanished
during a call raises `ContainerGoneError`. Lookups of something missing answer None.

Processes see the container's own paths (`WORKSPACE`, `APP_DIR` of `image/rootfs.py`).
A process may run as a *job* (a number from the caller's pool): `kill_job` ends every
process of that job, children that left their session included, and nothing else.

An attached process talks over one socket: what is written to it is the process's stdin;
what comes back is its stdout and stderr as frames of an 8-byte header (stream 1 or 2,
three zero bytes, the big-endian length) and the data (Docker's own attach format).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from sandbox.errors import SandboxUnavailableError
from sandbox.image.rootfs import WORKSPACE

__all__ = [
    "HOME_DIR",
    "Attached",
    "ContainerEngine",
    "ContainerGoneError",
    "ContainerInfo",
    "ContainerSpec",
    "ExecResult",
    "HostLeases",
    "JobLimits",
    "SandboxLimits",
    "Snapshots",
    "TellsLeftovers",
    "VolumeInfo",
    "WorkerHeldError",
    "WorkerHost",
    "gone_if_missing",
    "is_running",
]

GIB = 1024**3
# The sandbox user's home: a service sandbox's volume is mounted here (see volume_mount).
HOME_DIR = "/home/user"
STDOUT, STDERR = 1, 2
# How often something waiting on a sandbox (a command's output, the worker's answer) checks the
# container still runs: a stopped one can leave `docker exec`'s stream open under gVisor.
LIVENESS_CHECK_S = 2.0


class ContainerGoneError(SandboxUnavailableError):
    """The container (or the process in it) went away during the call."""


@contextlib.contextmanager
def gone_if_missing(message: str) -> Iterator[None]:
    """A removal deletes a sandbox's host files (its bundle, the directory of its worker's
    socket) as the call runs: a file of it found missing means the sandbox went, and the call
    is told so, never the missing path."""
    try:
        yield
    except FileNotFoundError:
        raise ContainerGoneError(message) from None


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    """The hardening of a sandbox, each part configurable (docs/security.md says why each is
    there). An engine that cannot isolate (local) ignores it, and says so."""

    network_mode: str = "none"
    read_only: bool = True
    cap_drop: tuple[str, ...] = ("ALL",)
    no_new_privileges: bool = True
    init: bool = True
    user: str = "1000:1000"
    pids_limit: int = 512  # the sandboxed browser: ~110 tasks, and ~11 more per tab
    memory_bytes: int = GIB
    cpus: float = 1.0
    # A private /tmp of this size ("" for none).
    tmp_size: str = "256m"
    # The OCI runtime (sandbox/runtimes.py; None: the engine's default).
    runtime: str | None = None


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    name: str
    image: str
    labels: Mapping[str, str]
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    # Mounted read-write at `volume_mount` (created by `create_volume` first).
    workspace_volume: str | None = None
    # Where the volume goes: the workspace for a thread's sandbox, the whole home for a
    # service sandbox (n8n's assistant keeps its npm cache and tools beside its workspace).
    volume_mount: str = WORKSPACE
    # A directory of the image whose files a new volume starts with, group-writable, owned by
    # the sandbox user and marked seeded (workspace_seed.py), where the engine fills volumes on
    # the host (runsc: a copy there is nearly free, one inside gVisor ~0.25 CPU-s). Other
    # engines ignore it: the seeding exec does the same, and skips a volume already marked.
    volume_seed: str | None = None
    # Host directory → path in the container, read-write.
    binds: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    # The main process (None: the image's own); its stdin kept open for `attach`.
    command: list[str] | None = None
    stdin_open: bool = False
    # Removed by the engine as soon as its main process ends.
    auto_remove: bool = False
    # The main command runs under the image's job launcher (job_launcher.py), which then
    # starts the container's commands; engines that start each with an exec ignore it.
    job_launcher: bool = False


@dataclass(frozen=True, kw_only=True)
class ContainerInfo:
    id: str
    name: str
    labels: Mapping[str, str]
    status: str  # created | running | exited | ...
    workspace_volume: str | None = None
    # The OCI runtime it runs under ("" where the engine has none).
    runtime: str = ""


@dataclass(frozen=True, kw_only=True)
class VolumeInfo:
    name: str
    labels: Mapping[str, str]
    created_at: datetime | None
    # Where its data lives on this host (None where the engine keeps it elsewhere).
    mountpoint: Path | None


@dataclass(frozen=True)
class JobLimits:
    """Limits a job runs under, set on everything it starts, where the container's cgroups
    cannot do it per job: under gVisor (`SandboxProvider.job_limits`). Soft and hard: the
    job cannot raise them again. An engine sets them as it starts the job's process, or
    starts it through `wrap`."""

    processes: int  # RLIMIT_NPROC: tasks (threads counted) of the job's uid

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started under these limits by a shell. They are set in a forked subshell,
        which then execs `argv`: gVisor shares the limits of a process `docker exec` or
        `runsc exec` starts with the container's first process, so set there they would
        hold every later process."""
        return ["sh", "-c", f'(ulimit -p {self.processes} && exec "$@")', "sh", *argv]


@dataclass(frozen=True, kw_only=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


class Attached(Protocol):
    """A process's streams on one socket (see the module's docstring)."""

    @property
    def socket(self) -> socket.socket: ...

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """(STDOUT or STDERR, data) until the process's output ends; blocks."""
        ...

    def exit_code(self) -> int | None:
        """The exit code once the process ended (None: unknown or still running)."""
        ...

    def close(self) -> None:
        """Let go of the socket (idempotent)."""
        ...


@runtime_checkable
class TellsLeftovers(Protocol):
    """An `Attached` whose starter counted the job's processes as its process ended (the
    runsc engine's job launcher): none left, and the job needs no kill."""

    def processes_left(self) -> int | None: ...


@runtime_checkable
class ContainerEngine(Protocol):
    # Whether the sandbox image's programs (the workflow toolchain, the n8n engine, Chromium)
    # run in its containers.
    runs_image: bool

    def ping(self) -> None: ...

    def close(self) -> None: ...

    def runtimes(self) -> frozenset[str]:
        """The OCI runtimes registered with the engine (none for one without containers)."""
        ...

    # -- containers -------------------------------------------------------------------------

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        """A new container; the existing one when another caller made that name first."""
        ...

    def start(self, container_id: str) -> ContainerInfo: ...

    def inspect(self, name_or_id: str) -> ContainerInfo | None: ...

    def containers(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        """Containers with every label given (a value of None: the label, any value)."""
        ...

    def rename(self, container_id: str, name: str) -> bool:
        """False when the name is taken or the container is gone."""
        ...

    def remove(self, container_id: str) -> None:
        """Stop and remove (gone already is fine)."""
        ...

    def kill(self, container_id: str) -> None:
        """Stop it at once (stopped or gone already is fine)."""
        ...

    def attach(self, container_id: str) -> Attached:
        """The main process's streams (its stdin, when the spec kept it open)."""
        ...

    # -- processes --------------------------------------------------------------------------

    def exec(
        self,
        container_id: str,
        argv: list[str],
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        job: int | None = None,
    ) -> ExecResult: ...

    def exec_attached(
        self,
        container_id: str,
        argv: list[str],
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        job: int | None = None,
        stdin: bool = False,
        limits: JobLimits | None = None,
    ) -> Attached: ...

    def kill_job(self, container_id: str, job: int) -> bool:
        """Kill every process of the job; False when some could not be killed."""
        ...

    def running_jobs(self, container_id: str, jobs: range) -> list[int]:
        """The jobs of `jobs` that have a process in the container."""
        ...

    def out_of_memory_since(self, container_id: str, since: float) -> bool:
        """Whether the host's OOM killer struck in the container since `since` (seconds
        since the epoch). Under gVisor the process it kills is a piece of the sandbox's
        kernel, and the command it served hangs instead of ending."""
        ...

    def copy_in(self, container_id: str, directory: str, archive: bytes) -> None:
        """Unpack a tar archive into a directory of the container."""
        ...

    def copy_out(self, container_id: str, path: str) -> bytes:
        """A file or directory of the container, as a tar archive."""
        ...

    # -- volumes ----------------------------------------------------------------------------

    def volume(self, name: str) -> VolumeInfo | None: ...

    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo: ...

    def volumes(
        self, *, labels: Mapping[str, str] | None = None, name_prefix: str | None = None
    ) -> list[VolumeInfo]: ...

    def remove_volume(self, name: str) -> None:
        """Remove it (gone already is fine)."""
        ...


@runtime_checkable
class WorkerHost(Protocol):
    """An engine whose sandboxes run the worker as their main process, which connects out to
    a socket of the host's (worker.mjs `--connect`): the runsc engine, whose checkpoints
    must hold no stream of the host's. Other engines start the worker with `exec_attached`."""

    def worker_channel(self, container_id: str, timeout_s: float) -> Attached:
        """Listen on the container's worker socket until its worker connects (then listen no
        more: a worker that loses its connection waits for the next call); its replies come
        back as STDOUT frames. WorkerHeldError when another process (a replica) holds that
        worker's channel."""
        ...


class WorkerHeldError(SandboxUnavailableError):
    """The sandbox's main worker serves another process (a replica of the service): it has
    one channel, so this one starts a worker of its own (`exec_attached`), as on Docker."""


@runtime_checkable
class HostLeases(Protocol):
    """An engine whose sandboxes all live on this host (runsc driven directly): its owner
    leases are files locked by their holders under `lease_root` (lease.py), not containers (a
    gVisor sandbox running `cat` costs ~5 % of a core for as long as its service lives)."""

    @property
    def lease_root(self) -> Path: ...


@runtime_checkable
class Snapshots(Protocol):
    """An engine that can save a running sandbox and start new ones from the save."""

    # Where templates of this engine's sandboxes are kept (templates.py).
    @property
    def template_root(self) -> Path: ...

    def checkpoint(self, container_id: str, image_dir: Path, *, leave_running: bool) -> None: ...

    def restore(self, container_id: str, image_dir: Path) -> ContainerInfo: ...

    def suspend(self, container_id: str) -> None:
        """Stop a sandbox with all of its state kept (its next `start` brings it back)."""
        ...

    def resume(self, container_id: str) -> ContainerInfo | None:
        """Bring a suspended sandbox back as it was (its processes, memory, files); None when
        it is not suspended or the resume failed (logged; a `start` then starts it afresh)."""
        ...


def is_running(engine: ContainerEngine, container_id: str) -> bool:
    """Whether the engine says the container exists and runs."""
    found = engine.inspect(container_id)
    return found is not None and found.status == "running"
