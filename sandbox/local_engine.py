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
import fcntl
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import structlog

from sandbox.egress import MOUNT_POINT
from sandbox.engine import (
    STDERR,
    STDOUT,
    Attached,
    ContainerGoneError,
    ContainerInfo,
    ContainerSpec,
    ExecResult,
    VolumeInfo,
)
from sandbox.errors import SandboxUnavailableError
from sandbox.image.build import IMAGE_DIR
from sandbox.image.rootfs import APP_DIR, WORKSPACE

__all__ = ["JOB_MARKER", "LocalEngine"]

log = structlog.get_logger(__name__)

JOB_MARKER = "INSTANCE_AI_JOB"
HOME = "/home/user"
# After the main process exits, how long its output may still drain (a child that keeps the
# pipe open does not hold the stream: it is killed with its job).
DRAIN_S = 0.2
_HEADER_LENGTH = 8

# The first process of a PID namespace ignores every signal it has no handler for (a command
# could not kill itself), so it runs the command as its child and exits with its status. The
# explicit `<&3` keeps stdin: a background job's stdin would otherwise be /dev/null. `wait`'s
# own report ("Killed") is not the command's output.
_NAMESPACE_INIT = 'exec 3<&0; "$@" <&3 3<&- & exec 3<&-; wait $! 2>/dev/null'
_NAMESPACE_COMMANDS = (
    ["unshare", "--pid", "--fork", "--kill-child"],
    ["unshare", "--map-current-user", "--pid", "--fork", "--kill-child"],
)


@dataclass(kw_only=True)
class _Record:
    id: str
    name: str
    labels: dict[str, str]
    status: str
    workspace_volume: str | None
    binds: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)

    def info(self) -> ContainerInfo:
        return ContainerInfo(
            id=self.id,
            name=self.name,
            labels=dict(self.labels),
            status=self.status,
            workspace_volume=self.workspace_volume,
        )


class LocalEngine:
    """`ContainerEngine` over directories under `root` and subprocesses."""

    runs_image = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self._containers = root / "containers"
        self._volumes = root / "volumes"
        for directory in (self._containers, self._volumes):
            directory.mkdir(parents=True, exist_ok=True)
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
        with self._locked():
            existing = self._by_name(spec.name)
            if existing is not None:
                return existing.info()
            record = _Record(
                id=uuid.uuid4().hex,
                name=spec.name,
                labels=dict(spec.labels),
                status="created",
                workspace_volume=spec.workspace_volume,
                binds={path: host for host, path in spec.binds.items()},
                environment=dict(spec.environment),
            )
            self._save(record)
        return record.info()

    def start(self, container_id: str) -> ContainerInfo:
        with self._locked():
            record = self._require(container_id)
            record.status = "running"
            self._save(record)
        return record.info()

    def inspect(self, name_or_id: str) -> ContainerInfo | None:
        record = self._load(name_or_id) or self._by_name(name_or_id)
        return record.info() if record is not None else None

    def containers(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        return [
            r.info()
            for r in self._records()
            if all(k in r.labels and (v is None or r.labels[k] == v) for k, v in labels.items())
        ]

    def rename(self, container_id: str, name: str) -> bool:
        with self._locked():
            record = self._load(container_id)
            if record is None or self._by_name(name) is not None:
                return False
            record.name = name
            self._save(record)
        return True

    def remove(self, container_id: str) -> None:
        self.kill(container_id)
        with self._locked():
            (self._containers / f"{container_id}.json").unlink(missing_ok=True)

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
        return ExecResult(exit_code=_exit_code(process.returncode), stdout=stdout, stderr=stderr)

    def exec_attached(
        self,
        container_id: str,
        argv: list[str],
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        job: int | None = None,
        stdin: bool = False,
    ) -> Attached:
        command, directory, environment = self._process(container_id, argv, workdir, env, job)
        process, started = self._launch(
            container_id, job, command, directory, environment, stdin=stdin
        )
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        return _Process(process, ours, theirs, on_exit=started.forget)

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
        target = Path(self._host(self._require(container_id), directory))
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            # The data filter refuses members that would land outside the target.
            tar.extractall(target, filter="data")

    def copy_out(self, container_id: str, path: str) -> bytes:
        source = Path(self._host(self._require(container_id), path))
        if not source.exists():
            raise SandboxUnavailableError(f"{path} does not exist in the sandbox")
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.add(source, arcname=source.name)
        return archive.getvalue()

    # -- volumes ----------------------------------------------------------------------------

    def volume(self, name: str) -> VolumeInfo | None:
        meta = self._volumes / f"{name}.json"
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            return None
        return VolumeInfo(
            name=name,
            labels=dict(data.get("labels") or {}),
            created_at=datetime.fromisoformat(data["created"]),
            mountpoint=self._volumes / name,
        )

    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo:
        (self._volumes / name).mkdir(parents=True, exist_ok=True)
        meta = {"labels": dict(labels), "created": datetime.now(UTC).isoformat()}
        (self._volumes / f"{name}.json").write_text(json.dumps(meta))
        found = self.volume(name)
        assert found is not None
        return found

    def volumes(
        self, *, labels: Mapping[str, str] | None = None, name_prefix: str | None = None
    ) -> list[VolumeInfo]:
        found = [self.volume(meta.stem) for meta in self._volumes.glob("*.json")]
        return [
            v
            for v in found
            if v is not None
            and (not name_prefix or v.name.startswith(name_prefix))
            and all(v.labels.get(k) == value for k, value in (labels or {}).items())
        ]

    def remove_volume(self, name: str) -> None:
        shutil.rmtree(self._volumes / name, ignore_errors=True)
        (self._volumes / f"{name}.json").unlink(missing_ok=True)

    # -- plumbing ---------------------------------------------------------------------------

    def _process(
        self,
        container_id: str,
        argv: list[str],
        workdir: str,
        env: Mapping[str, str] | None,
        job: int | None,
    ) -> tuple[list[str], str, dict[str, str]]:
        record = self._require(container_id)
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
        return self._containers / container_id / "processes"

    def _started(self, container_id: str) -> list[_Started]:
        directory = self._processes_dir(container_id)
        return (
            [_Started.read(path) for path in directory.glob("*.pid")] if directory.is_dir() else []
        )

    def _host(self, record: _Record, text: str) -> str:
        """`text` with the container's paths as this host's (one pass: nothing rewritten is
        rewritten again)."""
        workspace = (
            str(self._volumes / record.workspace_volume)
            if record.workspace_volume
            else str(self._containers / record.id / "workspace")
        )
        roots = {
            WORKSPACE: workspace,
            HOME: workspace,
            APP_DIR: str(IMAGE_DIR),
            MOUNT_POINT: str(self._containers / record.id / "run"),
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

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Creating and renaming are claims: one at a time, across processes."""
        with (self.root / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _records(self) -> list[_Record]:
        records = []
        for path in self._containers.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, TypeError):
                records.append(_Record(**json.loads(path.read_text())))
        return records

    def _load(self, container_id: str) -> _Record | None:
        if not re.fullmatch(r"[0-9a-f]{32}", container_id):
            return None
        try:
            return _Record(**json.loads((self._containers / f"{container_id}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _by_name(self, name: str) -> _Record | None:
        return next((r for r in self._records() if r.name == name), None)

    def _require(self, container_id: str) -> _Record:
        record = self._load(container_id)
        if record is None:
            raise ContainerGoneError(f"local sandbox {container_id} is gone")
        return record

    def _save(self, record: _Record) -> None:
        path = self._containers / f"{record.id}.json"
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(record)))
        partial.replace(path)


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


class _Process:
    """A subprocess's streams on a socket, framed as the seam says (see engine.py)."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        ours: socket.socket,
        theirs: socket.socket,
        *,
        on_exit: Callable[[], None],
    ):
        self._process = process
        self._on_exit = on_exit
        self._ours = ours
        self._theirs = theirs
        self._send = threading.Lock()
        self._closed = False
        if process.stdin is not None:
            threading.Thread(target=self._feed_stdin, daemon=True).start()
        for stream_id, pipe in ((STDOUT, process.stdout), (STDERR, process.stderr)):
            threading.Thread(target=self._forward, args=(stream_id, pipe), daemon=True).start()
        threading.Thread(target=self._end_with_process, daemon=True).start()

    @property
    def socket(self) -> socket.socket:
        return self._ours

    def frames(self) -> Iterator[tuple[int, bytes]]:
        reader = self._ours.makefile("rb")
        try:
            while header := reader.read(_HEADER_LENGTH):
                if len(header) < _HEADER_LENGTH:
                    return
                length = int.from_bytes(header[4:], "big")
                data = reader.read(length)
                if data:
                    yield header[0], data
        except OSError:
            return
        finally:
            reader.close()

    def exit_code(self) -> int | None:
        code = self._process.poll()
        return None if code is None else _exit_code(code)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sock in (self._ours, self._theirs):
            with contextlib.suppress(OSError):
                sock.close()

    def _feed_stdin(self) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            while data := self._theirs.recv(65536):
                stdin.write(data)
                stdin.flush()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def _forward(self, stream_id: int, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        with pipe, contextlib.suppress(OSError, ValueError):
            while data := pipe.read1(65536):  # type: ignore[attr-defined]
                header = bytes([stream_id, 0, 0, 0]) + len(data).to_bytes(4, "big")
                with self._send:
                    self._theirs.sendall(header + data)

    def _end_with_process(self) -> None:
        """The stream ends when the main process does (after a moment to drain)."""
        self._process.wait()
        self._on_exit()
        time.sleep(DRAIN_S)
        with contextlib.suppress(OSError), self._send:
            self._theirs.shutdown(socket.SHUT_WR)


def _marker(container_id: str, job: int | None) -> str:
    return f"{JOB_MARKER}={container_id}:{'' if job is None else job}"


def _exit_code(code: int) -> int:
    """A process killed by a signal as a shell reports it (128 + the signal)."""
    return 128 - code if code < 0 else code


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
