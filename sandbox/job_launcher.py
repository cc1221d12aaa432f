"""The host's end of a sandbox's job launcher (`image/bin/launcher.py`, whose docstring has
the protocol): the runsc engine starts commands through it instead of a `runsc exec` each.

A sandbox made with `ContainerSpec.job_launcher` runs the launcher as its first process under
its init, as root with CAP_SETUID and CAP_SETGID alone (`launcher_process`), and it starts the
main command as the sandbox user. It connects out to a socket of the host's, made in a
directory of the sandbox's own that only root may enter (`LAUNCHER_SOCKET_DIR`), as the worker
does (worker_socket.py: one holder, replicas told at once). One channel serves all of a
sandbox's commands at once, each a request id.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import struct
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import structlog

from sandbox.engine import STDERR, STDOUT, ContainerGoneError, ExecResult, WorkerHeldError
from sandbox.errors import SandboxUnavailableError
from sandbox.image.rootfs import APP_DIR
from sandbox.worker_socket import SocketChannel, wait_for_worker

__all__ = [
    "LAUNCHER_DIR",
    "LAUNCHER_LOCK",
    "LAUNCHER_SOCKET_DIR",
    "JobChannel",
    "JobLaunchers",
    "LaunchedJob",
    "LauncherGoneError",
    "launcher_process",
]

log = structlog.get_logger(__name__)

LAUNCHER_SCRIPT = f"{APP_DIR}/bin/launcher.py"
LAUNCHER_SOCKET_DIR = "/run/instance-ai-jobs"
LAUNCHER_SOCKET = f"{LAUNCHER_SOCKET_DIR}/jobs.sock"
# In a sandbox's bundle: the directory of the launcher's socket, and the lock its holder keeps.
LAUNCHER_DIR = "jobs"
LAUNCHER_LOCK = "jobs.lock"
# How long a first command waits for the launcher to connect (it retries every 20 ms at
# first, every 250 ms once long unheard) before it falls back to `runsc exec`.
LAUNCHER_WAIT_S = 5.0
# What the launcher needs to hand each job its uid, and all it has.
LAUNCHER_CAPABILITIES = ["CAP_SETUID", "CAP_SETGID"]

_HEADER = struct.Struct("!IBI")  # request id, kind, payload length
_SPAWN, _STDOUT, _STDERR, _EXIT = 1, 2, 3, 4
_STREAMS = {_STDOUT: STDOUT, _STDERR: STDERR}


def launcher_process(user: str, command: list[str]) -> dict[str, Any]:
    """The OCI process fields of a sandbox whose main `command` runs under the launcher as
    `user` ("uid:gid"): the launcher's argv, its user (root) and its capabilities."""
    argv = ["python3", LAUNCHER_SCRIPT, "--connect", LAUNCHER_SOCKET, "--user", user]
    capabilities = {kind: LAUNCHER_CAPABILITIES for kind in ("bounding", "effective", "permitted")}
    return {
        "args": [*argv, "--", *command],
        "user": {"uid": 0, "gid": 0, "additionalGids": []},
        "capabilities": capabilities,
    }


class LauncherGoneError(SandboxUnavailableError):
    """The launcher's channel ended before the command did: the caller tells why."""


class LaunchedJob:
    """A command the launcher started, as the seam's `Attached` without stdin."""

    def __init__(self, forget: Callable[[], None]) -> None:
        self._frames: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()
        self._exit_code: int | None = None
        self._left: int | None = None
        self._forget = forget

    @property
    def socket(self) -> socket.socket:
        raise SandboxUnavailableError("a command started by the job launcher has no stdin")

    def frames(self) -> Iterator[tuple[int, bytes]]:
        while (frame := self._frames.get()) is not None:
            yield frame

    def exit_code(self) -> int | None:
        """None also when the channel ended before the launcher told it (its sandbox went
        away, or the host let go of the channel)."""
        return self._exit_code

    def processes_left(self) -> int | None:
        """How many processes of its job the launcher found as the command ended."""
        return self._left

    def close(self) -> None:
        self._forget()

    def output(self, stream: int, data: bytes) -> None:
        self._frames.put((stream, data))

    def end(self, exit_code: int | None, left: int | None = None) -> None:
        self._exit_code, self._left = exit_code, left
        self._frames.put(None)


class JobChannel:
    """A connected launcher: `spawn` many commands at once; a reader thread sorts their
    output by request id. Once the connection ends, every command not yet ended ends with an
    unknown exit code, and `spawn` refuses."""

    def __init__(self, channel: SocketChannel) -> None:
        self._channel = channel
        self._lock = threading.Lock()
        self._jobs: dict[int, LaunchedJob] = {}
        self._next_request = 1
        self._closed = False
        threading.Thread(target=self._read, name="job-launcher-reader", daemon=True).start()

    @property
    def closed(self) -> bool:
        return self._closed

    def spawn(
        self,
        argv: list[str],
        *,
        uid: int,
        cwd: str,
        env: Mapping[str, str],
        processes: int | None = None,
    ) -> LaunchedJob:
        """Start a command; `processes`: its RLIMIT_NPROC (the launcher's own when None)."""
        fields = {"argv": argv, "uid": uid, "cwd": cwd, "env": dict(env)}
        if processes is not None:
            fields["processes"] = processes
        order = json.dumps(fields).encode()
        with self._lock:
            if self._closed:
                raise SandboxUnavailableError("the sandbox's job launcher is not connected")
            request = self._next_request
            self._next_request += 1
            job = LaunchedJob(lambda: self._forget(request))
            self._jobs[request] = job
            try:
                self._channel.socket.sendall(_HEADER.pack(request, _SPAWN, len(order)) + order)
            except OSError as exc:
                del self._jobs[request]
                raise SandboxUnavailableError(f"the job launcher's channel failed: {exc}") from exc
        return job

    def run(self, argv: list[str], *, uid: int, cwd: str, env: Mapping[str, str]) -> ExecResult:
        """Run a command to its end; its output whole. LauncherGoneError when the channel
        ended first."""
        job = self.spawn(argv, uid=uid, cwd=cwd, env=env)
        output: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray()}
        try:
            for stream, data in job.frames():
                output[stream].extend(data)
        finally:
            job.close()
        code = job.exit_code()
        if code is None:
            raise LauncherGoneError("the sandbox's job launcher went away during the command")
        return ExecResult(
            exit_code=code,
            stdout=bytes(output[STDOUT]),
            stderr=bytes(output[STDERR]),
        )

    def close(self) -> None:
        self._channel.close()  # the reader then ends what is left

    def _forget(self, request: int) -> None:
        with self._lock:
            self._jobs.pop(request, None)

    def _read(self) -> None:
        received = bytearray()
        connection = self._channel.socket
        try:
            while data := connection.recv(65536):
                received.extend(data)
                while len(received) >= _HEADER.size:
                    request, kind, length = _HEADER.unpack_from(received)
                    if len(received) < _HEADER.size + length:
                        break
                    payload = bytes(received[_HEADER.size : _HEADER.size + length])
                    del received[: _HEADER.size + length]
                    self._deliver(request, kind, payload)
        except OSError:
            pass
        finally:
            with self._lock:
                self._closed = True
                left, self._jobs = list(self._jobs.values()), {}
            for job in left:
                job.end(None)
            self._channel.close()

    def _deliver(self, request: int, kind: int, payload: bytes) -> None:
        with self._lock:
            job = self._jobs.get(request)
            if job is not None and kind == _EXIT:
                del self._jobs[request]
        if job is None:
            return  # a command its caller let go of
        if kind in _STREAMS:
            job.output(_STREAMS[kind], payload)
        elif kind == _EXIT:
            job.end(*_ending(payload))


def _ending(payload: bytes) -> tuple[int | None, int | None]:
    """What an EXIT frame tells: the exit code and the job's processes left (each None
    where it says nothing readable)."""
    try:
        told = json.loads(payload)
    except ValueError:
        return None, None
    return _count(told, "code"), _count(told, "left")


def _count(told: object, key: str) -> int | None:
    value = told.get(key) if isinstance(told, dict) else None
    return value if type(value) is int else None


class JobLaunchers:
    """This process's channels to its sandboxes' launchers, by container id: awaited from
    the moment a sandbox starts (`expect`), else connected at its first command; kept until
    `forget` (its sandbox stops, is saved or goes)."""

    def __init__(self, wait_s: float = LAUNCHER_WAIT_S) -> None:
        self._wait_s = wait_s
        self._lock = threading.Lock()
        self._channels: dict[str, JobChannel] = {}
        self._connecting: dict[str, threading.Lock] = {}
        # Sandboxes whose launcher did not connect: not waited for again until `forget`.
        self._silent: set[str] = set()

    @staticmethod
    def prepare(bundle: Path) -> Path:
        """The directory of a new bundle where its launcher's socket will be: only root (the
        launcher) may enter it in the sandbox."""
        directory = bundle / LAUNCHER_DIR
        directory.mkdir(mode=0o700, exist_ok=True)
        directory.chmod(0o700)
        return directory

    def channel(
        self,
        container_id: str,
        bundle: Path,
        running: Callable[[], bool],
        *,
        give_up: bool = True,
    ) -> JobChannel | None:
        """The sandbox's launcher, connected; None when another process of this host holds
        it (a replica: it then uses `runsc exec`) or it did not connect (with `give_up`,
        logged once and not waited for again). ContainerGoneError when the sandbox stopped
        meanwhile."""
        with self._lock:
            channel = self._channels.get(container_id)
            if channel is not None and not channel.closed:
                return channel
            if container_id in self._silent:
                return None
            connecting = self._connecting.setdefault(container_id, threading.Lock())
        with connecting:  # one wait at a time: each makes the socket anew
            with self._lock:
                channel = self._channels.get(container_id)
                if channel is not None and not channel.closed:
                    return channel
            path = bundle / LAUNCHER_DIR / Path(LAUNCHER_SOCKET).name
            try:
                connection = wait_for_worker(
                    path, bundle / LAUNCHER_LOCK, self._wait_s, running, "job launcher"
                )
            except WorkerHeldError:
                return None
            except ContainerGoneError:
                raise
            except SandboxUnavailableError as exc:
                if not give_up:
                    return None
                log.warning(
                    "a sandbox's job launcher did not connect; its commands use runsc exec",
                    container=container_id,
                    reason=str(exc),
                )
                with self._lock:
                    self._silent.add(container_id)
                return None
            channel = JobChannel(connection)
            with self._lock:
                self._channels[container_id] = channel
            return channel

    def expect(self, container_id: str, bundle: Path, running: Callable[[], bool]) -> None:
        """Wait for the sandbox's launcher in a thread of its own, listening from before its
        sandbox starts or is restored: a restored launcher tries at once and then every
        20 ms (every 250 ms after 5 s unheard: a pool member claimed later), so its first
        command finds it connected. A wait that runs out (a cold start on a loaded machine)
        leaves it to that first command."""

        def wait() -> None:
            with contextlib.suppress(SandboxUnavailableError):
                self.channel(container_id, bundle, running, give_up=False)

        threading.Thread(target=wait, name="job-launcher-wait", daemon=True).start()

    def forget(self, container_id: str) -> None:
        """Let go of the sandbox's channel, if any (its commands end unheard), and wait for
        its launcher again next time."""
        with self._lock:
            channel = self._channels.pop(container_id, None)
            self._silent.discard(container_id)
            self._connecting.pop(container_id, None)
        if channel is not None:
            channel.close()

    def close(self) -> None:
        with self._lock:
            ids = list(self._channels)
        for container_id in ids:
            self.forget(container_id)
