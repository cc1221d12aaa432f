"""Commands in a sandbox: a deadline, a whole-tree kill, capped output, nothing left behind.

Each command runs as its own *job* of the engine (umask 002 so the files it makes stay
editable by the sandbox user). At the deadline, or when the caller cancels, the engine kills
every process of the job, children that called `setsid` included (which a process-group kill
misses), and nothing else: on Docker a job is a uid of its own (see docker_engine.py).

Output is read on the host. Each stream keeps its first `max_output_bytes` for the result
(and only that reaches a live listener); the whole combined output (up to `max_saved_bytes`)
is written into the workspace when it was cut, and its path returned so it can be paged.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from queue import Empty, Queue

from sandbox.engine import (
    LIVENESS_CHECK_S,
    STDERR,
    STDOUT,
    Attached,
    ContainerEngine,
    JobLimits,
    TellsLeftovers,
    is_running,
)
from sandbox.errors import SandboxUnavailableError
from sandbox.image.rootfs import USER_UID, WORKSPACE

__all__ = [
    "JOB_UID_COUNT",
    "JOB_UID_FIRST",
    "RESULTS_DIR",
    "SIGKILLED",
    "CommandResult",
    "CommandRunner",
    "JobCounter",
    "JobUidPool",
    "OutputCallback",
    "OutputCapture",
    "record_output",
]

# Job uids: disjoint from the sandbox user (1000) and from each other while in use.
JOB_UID_FIRST = 20_000
JOB_UID_COUNT = 10_000
RESULTS_DIR = ".instance-ai/results"

OutputCallback = Callable[[str, bytes], None]
# How many processes a job uid has left in the container (the in-sandbox worker answers in
# about a millisecond); None when it cannot tell.
JobCounter = Callable[[int], int | None]
# The exit code of a process killed by SIGKILL (128 + 9): its own OOM kill, or its sandbox's end.
SIGKILLED = 137
# Told after the output of a command the host's OOM killer ended under gVisor.
OUT_OF_MEMORY_NOTE = b"\nkilled: the sandbox ran out of memory\n"


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    cancelled: bool
    duration_ms: int
    truncated: bool
    # Workspace-relative path of the full output when it was cut, else None.
    full_output_path: str | None

    @property
    def success(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


class JobUidPool:
    """Hands out job uids; thread-safe. A uid is reused only after its command ended, and
    the least recently released first: the zombies a killed job leaves (a fork bomb's
    thousands) count against its uid's process limit until PID 1 reaps them, and a command
    handed that uid at once could not fork."""

    def __init__(self, first: int = JOB_UID_FIRST, count: int = JOB_UID_COUNT) -> None:
        self._lock = threading.Lock()
        self._free = collections.deque(range(first, first + count))

    def acquire(self) -> int:
        with self._lock:
            if not self._free:
                raise SandboxUnavailableError("too many commands running at once; retry later")
            return self._free.popleft()

    def release(self, uid: int) -> None:
        with self._lock:
            self._free.append(uid)


class KeyedLocks:
    """A lock per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[Hashable, tuple[threading.Lock, list[int]]] = {}

    @contextlib.contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        with self._lock:
            lock, users = self._locks.setdefault(key, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._lock:
                users[0] -= 1
                if not users[0]:
                    del self._locks[key]


class OutputCapture:
    """Per stream, the first `limit` bytes inline; all streams together, up to `saved_limit`
    bytes for the full copy kept when output was cut."""

    def __init__(self, limit: int, saved_limit: int) -> None:
        self.limit = limit
        self.saved_limit = saved_limit
        self.kept = {"stdout": bytearray(), "stderr": bytearray()}
        self.combined = bytearray()
        self.truncated = False

    def add(self, stream: str, data: bytes) -> bytes:
        """Record a chunk; returns the part kept inline (what a live listener may see)."""
        kept = self.kept[stream]
        room = max(self.limit - len(kept), 0)
        inline = data[:room]
        kept.extend(inline)
        if len(data) > room:
            self.truncated = True
        if len(self.combined) < self.saved_limit:
            self.combined.extend(data[: self.saved_limit - len(self.combined)])
        return inline


class CommandRunner:
    """Runs commands in containers. One per provider; shares the job uid pool."""

    def __init__(
        self,
        engine: ContainerEngine,
        *,
        max_output_bytes: int = 64 * 1024,
        max_saved_bytes: int = 32 * 1024 * 1024,
        uids: JobUidPool | None = None,
    ) -> None:
        self.engine = engine
        self.max_output_bytes = max_output_bytes
        self.max_saved_bytes = max_saved_bytes
        self.uids = uids or JobUidPool()
        self._kills = KeyedLocks()

    def run(
        self,
        container_id: str,
        command: str,
        *,
        timeout_s: float,
        cwd: str = WORKSPACE,
        env: dict[str, str] | None = None,
        cancel: threading.Event | None = None,
        on_output: OutputCallback | None = None,
        job_processes: JobCounter | None = None,
        job_limits: JobLimits | None = None,
    ) -> CommandResult:
        """Run `command` with `sh -c`; block until it ends, times out or is cancelled.
        `job_processes`: asked after a normal exit (unless the engine told already), a job
        with nothing left needs no kill.
        `job_limits`: the command runs under them (gVisor's), and the host's OOM killer is
        watched for (`_health`)."""
        uid = self.uids.acquire()
        started, since = time.monotonic(), time.time()
        stopped: str | None = "not started"
        left: int | None = None  # the job's processes as it ended, where the engine told
        capture = OutputCapture(self.max_output_bytes, self.max_saved_bytes)
        try:
            argv = ["sh", "-c", "umask 002\n" + command]
            attached = self.engine.exec_attached(
                container_id, argv, workdir=cwd, env=env, job=uid, limits=job_limits
            )
            chunks: Queue[tuple[str, bytes] | None] = Queue()
            reader = threading.Thread(
                target=_pump, args=(attached, chunks), name="sandbox-exec-reader", daemon=True
            )
            reader.start()
            # Under gVisor (job limits) the host's OOM killer is watched for: see `_health`.
            health = functools.partial(self._health, container_id, since, job_limits is not None)
            stopped = _collect(chunks, capture, on_output, started + timeout_s, cancel, health)
            if stopped not in (None, "gone"):
                self._kill_job(container_id, uid)
                _drain(chunks, capture, on_output, reader)
            reader.join(timeout=5)
            exit_code = attached.exit_code()
            if isinstance(attached, TellsLeftovers):
                left = attached.processes_left()
            if stopped == "oom":  # as the host's kernel reports a process it killed for memory
                exit_code = SIGKILLED
                record_output(("stderr", OUT_OF_MEMORY_NOTE), capture, on_output)
            if stopped == "gone" or (
                stopped is None
                and exit_code in (None, SIGKILLED)
                and not self._running(container_id)
            ):
                raise SandboxUnavailableError(
                    "the sandbox stopped during the command (removed, killed or the engine "
                    "restarted); the next call starts it again with the same workspace"
                )
            full_path = None
            if capture.truncated:
                full_path = self._save_output(container_id, capture.combined)
        finally:
            # Also after a normal exit: background children must not outlive their command,
            # nor run on under a uid that goes back to the pool.
            if not (stopped is None and (left == 0 or _nothing_left(job_processes, uid))):
                self._kill_job(container_id, uid)
            self.uids.release(uid)
        timed_out = stopped == "timeout"
        return CommandResult(
            exit_code=exit_code if isinstance(exit_code, int) else (124 if timed_out else -1),
            stdout=capture.kept["stdout"].decode(errors="replace"),
            stderr=capture.kept["stderr"].decode(errors="replace"),
            timed_out=timed_out,
            cancelled=stopped == "cancelled",
            duration_ms=int((time.monotonic() - started) * 1000),
            truncated=capture.truncated,
            full_output_path=full_path,
        )

    def kill_leftovers(self, container_id: str) -> list[int]:
        """Kill the commands a process that died (SIGKILL, a crash) left running in a
        sandbox it had: every process of a job. Returns the jobs that had any."""
        jobs = self.engine.running_jobs(
            container_id, range(JOB_UID_FIRST, JOB_UID_FIRST + JOB_UID_COUNT)
        )
        for job in jobs:
            self._kill_job(container_id, job)
        return jobs

    def _kill_job(self, container_id: str, job: int) -> None:
        """Kill every process of the job; when that fails (still alive after every round, or
        the engine cannot reach in) stop the container whole: the next use starts it again
        with the workspace intact. One kill of a job at a time: two at once (the janitor's
        and the sandbox's own reaper) run as the same uid, and each kills the other."""
        with self._kills.hold((container_id, job)):
            if not self.engine.kill_job(container_id, job):
                self.engine.kill(container_id)

    def _health(self, container_id: str, since: float, watch_memory: bool) -> str | None:
        """Why a running command will not end by itself: "gone" (its container stopped), "oom"
        (with `watch_memory`, the host's OOM killer struck in the container since the command
        started: under gVisor what it kills is a piece of the sandbox's kernel, and the
        command it served hangs instead of ending), else None."""
        if not is_running(self.engine, container_id):
            return "gone"
        if watch_memory and self.engine.out_of_memory_since(container_id, since):
            return "oom"
        return None

    def _running(self, container_id: str, *, settle_s: float = 2.0) -> bool:
        """Whether the container still runs after a command of it was SIGKILLed. A removal
        or an engine stop kills the processes before the container's state says so: watch
        it for a moment (a command killed for its own memory is the rare case that waits it
        out)."""
        deadline = time.monotonic() + settle_s
        while True:
            if not is_running(self.engine, container_id):
                return False
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.1)

    def _save_output(self, container_id: str, data: bytearray) -> str:
        relative = f"{RESULTS_DIR}/{uuid.uuid4().hex[:16]}.log"
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for directory in (".instance-ai", RESULTS_DIR):
                info = tarfile.TarInfo(directory)
                info.type, info.mode = tarfile.DIRTYPE, 0o2775
                info.uid = info.gid = USER_UID
                tar.addfile(info)
            info = tarfile.TarInfo(relative)
            info.size, info.mode, info.uid, info.gid = len(data), 0o664, USER_UID, USER_UID
            tar.addfile(info, io.BytesIO(bytes(data)))
        self.engine.copy_in(container_id, WORKSPACE, archive.getvalue())
        return relative


def _nothing_left(job_processes: JobCounter | None, uid: int) -> bool:
    if job_processes is None:
        return False
    try:
        return job_processes(uid) == 0
    except Exception:  # any doubt: the kill script runs
        return False


def _pump(attached: Attached, chunks: Queue[tuple[str, bytes] | None]) -> None:
    """Read the process's stdout/stderr frames until the stream ends."""
    names = {STDOUT: "stdout", STDERR: "stderr"}
    try:
        for stream_id, data in attached.frames():
            if stream_id in names:
                chunks.put((names[stream_id], data))
    finally:
        attached.close()
        chunks.put(None)


def _collect(
    chunks: Queue[tuple[str, bytes] | None],
    capture: OutputCapture,
    on_output: OutputCallback | None,
    deadline: float,
    cancel: threading.Event | None,
    health: Callable[[], str | None],
) -> str | None:
    """Take output until the stream ends (None), the deadline ("timeout"), a cancel, or
    `health`, asked every LIVENESS_CHECK_S, says why it will not end ("gone", "oom": under
    gVisor a command whose process, or the sandbox's kernel, was killed leaves the stream
    open, while others of its job may go on printing)."""
    checked = time.monotonic()
    while True:
        if cancel is not None and cancel.is_set():
            return "cancelled"
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            return "timeout"
        if now - checked >= LIVENESS_CHECK_S:
            checked = now
            why = health()
            if why is not None:
                return why
        try:
            item = chunks.get(timeout=min(remaining, 0.1))
        except Empty:
            continue
        if item is None:
            return None
        record_output(item, capture, on_output)


def record_output(
    item: tuple[str, bytes], capture: OutputCapture, on_output: OutputCallback | None
) -> None:
    stream, data = item
    inline = capture.add(stream, data)
    if inline and on_output is not None:
        on_output(stream, inline)


def _drain(
    chunks: Queue[tuple[str, bytes] | None],
    capture: OutputCapture,
    on_output: OutputCallback | None,
    reader: threading.Thread,
) -> None:
    """After a kill: keep what the dead tree had already written, until the stream ends."""
    reader.join(timeout=5)
    while True:
        try:
            item = chunks.get_nowait()
        except Empty:
            return
        if item is None:
            return
        record_output(item, capture, on_output)
