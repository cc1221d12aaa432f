"""The local engine, for machines without Docker: a "container" is a record and a directory,
a process is a subprocess of this service. It fits the container-engine seam (`engine.py`),
so the one sandbox manager runs on it.

IT DOES NOT ISOLATE: processes run as this service's user, see its files and reach its
network, and `SandboxLimits` is ignored. It keeps the seam's other promises: paths confined
to the workspace (checked by the manager's scripts, symlinks followed), jobs whose whole tree
dies, capped output. The sandbox image's programs are not here (`runs_image` is False): no
workflow toolchain, no n8n engine, no browser.

Processes see the container's paths: `/home/user/workspace`, `/home/user` and `/opt/app`
in their arguments, working directory and environment are rewritten to the workspace
volume's directory and this checkout's `sandbox/image` (its `seed/` and `bin/`).

Every process runs in a PID namespace of its own where the machine allows one (root, or
unprivileged user namespaces): killing its process group ends the namespace's first process,
and the kernel then kills everything left in the namespace, children that called `setsid`
included, with no need to find them. Each started process is written down in the container's
directory (pid and start time, so a reused pid is never taken for it): another service
process, after a crash, finds and kills what is left the same way. Nothing reads other
processes' memory: a scan of every process's environment (`/proc/<pid>/environ`) can block on
any process of the machine that is stuck, so it is only the fallback where no namespace can
be made (every process carries `INSTANCE_AI_JOB=<container>:<job>` in its environment for it,
which children inherit).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from sandbox.container_records import ContainerRecord, RecordStore, RecordVolumes
from sandbox.egress import MOUNT_POINT
from sandbox.engine import (
    Attached,
    ContainerInfo,
    ContainerSpec,
    ExecResult,
    JobLimits,
)
from sandbox.errors import SandboxUnavailableError
from sandbox.image.build import IMAGE_DIR
from sandbox.image.rootfs import APP_DIR, WORKSPACE
from sandbox.process_streams import ProcessStreams, exit_code_of

__all__ = ["JOB_MARKER", "LocalEngine"]

log = structlog.get_logger(__name__)

JOB_MARKER = "INSTANCE_AI_JOB"
HOME = "/home/user"

# The first process of a PID namespace ignores every signal it has no handler for (a command
# could not kill itself), so it runs the command as its child and exits with its status. The
# explicit `<&3` keeps stdin: a background job's stdin would otherwise be /dev/null. `wait`'s
# own report ("Killed") is not the command's output.
_NAMESPACE_INIT = 'exec 3<&0; "$@" <&3 3<&- & exec 3<&-; wait $! 2>/dev/null'
_NAMESPACE_COMMANDS = (
    ["unshare", "--pid", "--fork", "--kill-child"],
    ["unshare", "--map-current-user", "--pid", "--fork", "--kill-child"],
)


class LocalEngine(RecordVolumes):
    """`ContainerEngine` over directories under `root` and subprocesses."""

    runs_image = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self._store = RecordStore(root)
        self._namespace = _namespace_command()
        if not self._namespace:
            log.warning(
                "no PID namespace for local sandboxes: a command's children that leave its "
                "process group are found by their environment marker, scanning /proc"
            )
        log.warning(
            "LOCAL SANDBOXES DO NOT ISOLATE: commands run as this service's user, with its "
            "files and network. Use the docker provider for anything untrusted.",
            root=str(root),
        )

    @property
    def uses_pid_namespaces(self) -> bool:
        """Whether each process gets a PID namespace (so a kill takes its whole tree)."""
        return bool(self._namespace)

    def ping(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise SandboxUnavailableError(
                f"the local sandbox directory {self.root} is not writable"
            )

    def close(self) -> None:
        return None

    def runtimes(self) -> frozenset[str]:
        return frozenset()  # processes on this host: no container runtime at all

    # -- containers -------------------------------------------------------------------------

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        with self._store.locked():
            existing = self._store.by_name(spec.name)
            if existing is not None:
                return existing.info()
            record = ContainerRecord(
                id=self._store.new_id(),
                name=spec.name,
                labels=dict(spec.labels),
                status="created",
                workspace_volume=spec.workspace_volume,
                binds={path: host for host, path in spec.binds.items()},
                environment=dict(spec.environment),
            )
            self._store.save(record)
        return record.info()

    def start(self, container_id: str) -> ContainerInfo:
        with self._store.locked():
            record = self._store.require(container_id)
            record.status = "running"
            self._store.save(record)
        return record.info()

    def inspect(self, name_or_id: str) -> ContainerInfo | None:
        record = self._store.find(name_or_id)
        return record.info() if record is not None else None

    def containers(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        return [r.info() for r in self._store.matching(labels)]

    def rename(self, container_id: str, name: str) -> bool:
        return self._store.rename(container_id, name)

    def remove(self, container_id: str) -> None:
        self.kill(container_id)
        with self._store.locked():
            self._store.delete(container_id)

    def kill(self, container_id: str) -> None:
        for started in self._started(container_id):
            started.kill()
        if not self._namespace:
            self._kill_marked(f"{JOB_MARKER}={container_id}:")

    def attach(self, container_id: str) -> Attached:
        raise SandboxUnavailableError("a local container has no main process to attach to")

    # -- processes --------------------------------------------------------------------------

    def exec(
        self,
        container_id: str,
        argv: list[str],
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        job: int | None = None,
    ) -> ExecResult:
        command, directory, environment = self._process(container_id, argv, workdir, env, job)
        process, started = self._launch(container_id, job, command, directory, environment)
        stdout, stderr = process.communicate()
        started.forget()
        return ExecResult(exit_code=exit_code_of(process.returncode), stdout=stdout, stderr=stderr)

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
    ) -> Attached:
        argv = limits.wrap(argv) if limits else argv
        command, directory, environment = self._process(container_id, argv, workdir, env, job)
        process, started = self._launch(
            container_id, job, command, directory, environment, stdin=stdin
        )
        return ProcessStreams(process, on_exit=started.forget)

    def kill_job(self, container_id: str, job: int) -> bool:
        for started in self._started(container_id):
            if started.job == job:
                started.kill()
        return True if self._namespace else self._kill_marked(_marker(container_id, job))

    def out_of_memory_since(self, container_id: str, since: float) -> bool:
        return False  # no memory limit of its own: the host's processes

    def running_jobs(self, container_id: str, jobs: range) -> list[int]:
        found = {s.job for s in self._started(container_id) if s.job is not None and s.alive()}
        if not self._namespace:
            prefix = f"{JOB_MARKER}={container_id}:".encode()
            for _pid, environment in _processes():
                for entry in environment:
                    if entry.startswith(prefix) and entry[len(prefix) :].isdigit():
                        found.add(int(entry[len(prefix) :]))
        return sorted(j for j in found if j in jobs)

    def copy_in(self, container_id: str, directory: str, archive: bytes) -> None:
        target = Path(self._host(self._store.require(container_id), directory))
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            # The data filter refuses members that would land outside the target.
            tar.extractall(target, filter="data")

    def copy_out(self, container_id: str, path: str) -> bytes:
        source = Path(self._host(self._store.require(container_id), path))
        if not source.exists():
            raise SandboxUnavailableError(f"{path} does not exist in the sandbox")
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.add(source, arcname=source.name)
        return archive.getvalue()

    # -- plumbing ---------------------------------------------------------------------------

    def _process(
        self,
        container_id: str,
        argv: list[str],
        workdir: str,
        env: Mapping[str, str] | None,
        job: int | None,
    ) -> tuple[list[str], str, dict[str, str]]:
        record = self._store.require(container_id)
        directory = self._host(record, workdir)
        if not Path(directory).is_dir():
            raise SandboxUnavailableError(f"{workdir} does not exist in the sandbox")
        # A minimal environment: the service's own (keys, tokens) never reaches a process.
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            **record.environment,
            **(env or {}),
        }
        environment = {k: self._host(record, v) for k, v in environment.items()}
        environment["HOME"] = self._host(record, HOME)
        # Every process of the container carries its id (so removing it ends them all).
        environment[JOB_MARKER] = _marker(container_id, job).split("=", 1)[1]
        return [self._host(record, arg) for arg in argv], directory, environment

    def _launch(
        self,
        container_id: str,
        job: int | None,
        command: list[str],
        directory: str,
        environment: dict[str, str],
        *,
        stdin: bool = False,
    ) -> tuple[subprocess.Popen[bytes], _Started]:
        """Start `command` in a session (and PID namespace) of its own, written down to kill."""
        if self._namespace:
            command = [*self._namespace, "sh", "-c", _NAMESPACE_INIT, "sh", *command]
        try:
            process = subprocess.Popen(
                command,
                cwd=directory,
                env=environment,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxUnavailableError(f"could not start {command[0]}: {exc}") from exc
        started = _Started.record(self._processes_dir(container_id), job, process.pid)
        return process, started

    def _processes_dir(self, container_id: str) -> Path:
        return self._store.container_dir(container_id) / "processes"

    def _started(self, container_id: str) -> list[_Started]:
        directory = self._processes_dir(container_id)
        return (
            [_Started.read(path) for path in directory.glob("*.pid")] if directory.is_dir() else []
        )

    def _host(self, record: ContainerRecord, text: str) -> str:
        """`text` with the container's paths as this host's (one pass: nothing rewritten is
        rewritten again)."""
        workspace = (
            str(self._store.volumes_dir / record.workspace_volume)
            if record.workspace_volume
            else str(self._store.container_dir(record.id) / "workspace")
        )
        roots = {
            WORKSPACE: workspace,
            HOME: workspace,
            APP_DIR: str(IMAGE_DIR),
            MOUNT_POINT: str(self._store.container_dir(record.id) / "run"),
            **record.binds,
        }
        pattern = "|".join(re.escape(p) for p in sorted(roots, key=len, reverse=True))
        return re.sub(rf"(?<![\w./-])({pattern})(?=/|$|[^\w.-])", lambda m: roots[m.group(1)], text)

    def _kill_marked(self, needle_text: str) -> bool:
        """SIGKILL every process whose environment has an entry starting with `needle_text`,
        until two rounds in a row find none. False when some would not die."""
        needle = needle_text.encode()
        exact = not needle_text.endswith(":")
        quiet_rounds = 0
        for _round in range(40):
            found = False
            for pid, environment in _processes():
                if any(e == needle if exact else e.startswith(needle) for e in environment):
                    found = True
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            quiet_rounds = 0 if found else quiet_rounds + 1
            if quiet_rounds == 2:
                return True
            time.sleep(0.02)
        return False


@dataclass(frozen=True)
class _Started:
    """A process started for a container, as written down in its directory: its pid, and its
    start time (clock ticks since boot), which tells it from a later process with its pid."""

    path: Path
    job: int | None
    pid: int
    start_time: str | None

    @classmethod
    def record(cls, directory: Path, job: int | None, pid: int) -> _Started:
        directory.mkdir(parents=True, exist_ok=True)
        # A child is not reaped before it is waited for: its stat is there to read.
        started = cls(
            directory / f"{'' if job is None else job}-{pid}.pid", job, pid, _start_time(pid)
        )
        started.path.write_text(started.start_time or "")
        return started

    @classmethod
    def read(cls, path: Path) -> _Started:
        job, _, pid = path.stem.partition("-")
        try:
            start_time = path.read_text().strip() or None
        except OSError:
            start_time = None
        return cls(path, int(job) if job.isdigit() else None, int(pid), start_time)

    def alive(self) -> bool:
        return self.start_time is not None and _start_time(self.pid) == self.start_time

    def kill(self) -> None:
        """SIGKILL its process group (with a namespace: every process in it), if it is still
        the process that was started."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self.forget()

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


def _marker(container_id: str, job: int | None) -> str:
    return f"{JOB_MARKER}={container_id}:{'' if job is None else job}"


def _namespace_command() -> list[str]:
    """The first way to start a process in a new PID namespace that works here, or []."""
    for command in _NAMESPACE_COMMANDS:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [*command, "sh", "-c", _NAMESPACE_INIT, "sh", "sh", "-c", "exit 7"],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=10,
                check=False,
            )
            if done.returncode == 7:
                return command
    return []


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (after the command name, which may hold spaces)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _processes() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, environment entries) of every process this user may read."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        yield int(entry.name), environment.split(b"\0")
