"""The Docker engine behind the container-engine seam (`engine.py`), through the docker SDK.

Every docker SDK type and error stays in this module: callers get the seam's values, and
`SandboxUnavailableError` / `ContainerGoneError` with what to check. Jobs are uids: a job's
process runs as `<job>:1000`, and `kill -9 -1` run as that uid reaches all of its processes,
`setsid` escapees included, and nothing of other uids (see `job_kill.py`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests.exceptions
from docker.models.containers import Container
from docker.tls import TLSConfig
from docker.transport.unixconn import UnixHTTPConnection
from docker.utils.socket import frames_iter

from sandbox.engine import (
    HOME_DIR,
    Attached,
    ContainerGoneError,
    ContainerInfo,
    ContainerSpec,
    ExecResult,
    JobLimits,
    SandboxLimits,
    VolumeInfo,
)
from sandbox.errors import SandboxUnavailableError
from sandbox.image.build import require_image
from sandbox.image.catalog import extract_catalog
from sandbox.image.rootfs import USER_UID, WORKSPACE
from sandbox.job_kill import UidJobs
from sandbox.runtimes import GVISOR_HOST_PIDS_FACTOR, GVISOR_KERNEL_MEMORY, RUNSC

__all__ = ["DockerEngine", "DockerHost", "connect"]

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
# The sandbox user, and the home directory every process starts with.
USER = f"{USER_UID}:{USER_UID}"
HOME = {"HOME": HOME_DIR}
# How long a killed sandbox may take to be down.
KILL_WAIT_S = 30.0
# What the engine says when a kill finds the container's first process a zombie.
ZOMBIE = "is zombie and can not be killed"
# How much longer than the client's own timeout a removal may take (`DockerEngine.remove`).
REMOVE_WAIT_S = 120.0
# Where a sandbox's own volume may be mounted: a thread's workspace, or a service sandbox's home.
VOLUME_MOUNTS = (WORKSPACE, HOME_DIR)


@dataclass(frozen=True, kw_only=True)
class DockerHost:
    """Where one engine is reached: `unix://` (this host), `tcp://` (with TLS when the
    certificate paths are given) or `ssh://` (the `ssh` client of this host)."""

    url: str
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    @property
    def local(self) -> bool:
        """On this host: its bind mounts and volume directories are this host's paths."""
        return self.url.startswith("unix://")

    def client(self) -> docker.DockerClient:
        tls: TLSConfig | bool = False
        if self.ca_cert or self.client_cert:
            cert = (self.client_cert, self.client_key) if self.client_cert else None
            tls = TLSConfig(client_cert=cert, ca_cert=self.ca_cert, verify=bool(self.ca_cert))
        return docker.DockerClient(
            base_url=self.url, tls=tls, use_ssh_client=self.url.startswith("ssh://")
        )


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate the docker SDK's errors, and those of the HTTP client under it (a refused or
    cut connection while the engine restarts is not a DockerException), at this boundary."""
    try:
        yield
    except docker.errors.NotFound as exc:
        raise ContainerGoneError(
            f"the sandbox went away during the call ({exc.explanation or exc}); it was removed "
            "or stopped from outside. The next call makes it again, with the same workspace"
        ) from exc
    except docker.errors.APIError as exc:  # the engine answered, and said no
        raise SandboxUnavailableError(
            f"the Docker engine refused to {action}: {_short(exc)}"
        ) from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise SandboxUnavailableError(
            f"the Docker engine failed to {action}: {_short(exc)}. Is dockerd running and is "
            "DOCKER_HOST (or /var/run/docker.sock) reachable?"
        ) from exc


def _short(exc: Exception) -> str:
    """The error's own words, without the HTTP client's chain of wrapped reprs."""
    text = str(exc)
    return text if len(text) <= 300 else text[:300] + "…"


def _connect_or_close(self: UnixHTTPConnection) -> None:
    """docker-py's own `connect`, but a socket whose connect fails is closed instead of
    left to the garbage collector (every call while the engine restarts leaked one)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(self.timeout)
    try:
        sock.connect(self.unix_socket)
    except BaseException:
        sock.close()
        raise
    self.sock = sock


UnixHTTPConnection.connect = _connect_or_close


def _probe_unix_socket(host: str) -> None:
    """Fail early, and without leaking a socket (docker-py does on a refused connect), when
    the engine's unix socket cannot be reached."""
    if not host.startswith("unix://"):
        return
    path = host[len("unix://") :]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        try:
            probe.connect(path)
        except OSError as exc:
            raise SandboxUnavailableError(
                f"cannot reach the Docker engine at {path} ({exc.strerror or exc}): start "
                "dockerd (see README) or set DOCKER_HOST"
            ) from None


def connect(host: DockerHost | None = None) -> docker.DockerClient:
    """A client for `host` (None: the engine DOCKER_HOST names, by default this host's), or
    SandboxUnavailableError saying what to do."""
    url = host.url if host is not None else os.environ.get("DOCKER_HOST", DEFAULT_SOCKET)
    _probe_unix_socket(url)
    client = None
    try:
        client = host.client() if host is not None else docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        if client is not None:
            client.close()
        raise SandboxUnavailableError(
            f"cannot reach the Docker engine ({exc}): start dockerd (see README) or set DOCKER_HOST"
        ) from exc
    return client


class _Hijacked:
    """An attach or exec stream docker-py hijacked from its HTTP connection."""

    def __init__(self, wrapper: Any, exit_code: Any = None) -> None:
        self._wrapper = wrapper  # a SocketIO; `close()` forgets the socket without closing it
        self._exit_code = exit_code
        raw: socket.socket = wrapper._sock
        # The hijacked socket inherits the API client's read timeout; a stream may be quiet
        # for longer than that.
        raw.settimeout(None)
        self._socket = raw

    @property
    def socket(self) -> socket.socket:
        return self._socket

    def frames(self) -> Iterator[tuple[int, bytes]]:
        try:
            for stream_id, data in frames_iter(self._wrapper, tty=False):
                if data:
                    yield stream_id, data
        except OSError:
            return

    def exit_code(self) -> int | None:
        if self._exit_code is None:
            return None
        with contextlib.suppress(docker.errors.DockerException):
            code = self._exit_code()
            return code if isinstance(code, int) else None
        return None

    def close(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            self._wrapper._response.close()
        with contextlib.suppress(OSError, AttributeError):
            self._wrapper.close()
        with contextlib.suppress(OSError):
            self._socket.close()


class DockerEngine(UidJobs):
    """`ContainerEngine` over one Docker engine."""

    runs_image = True

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    @classmethod
    def connect(cls, host: DockerHost | None = None) -> DockerEngine:
        return cls(connect(host))

    def ping(self) -> None:
        with engine_errors("answer a ping"):
            self.client.ping()

    def close(self) -> None:
        self.client.close()

    def runtimes(self) -> frozenset[str]:
        with engine_errors("list its runtimes"):
            return frozenset(self.client.info().get("Runtimes") or {})

    # -- what this engine alone offers (the image lives in its store) ------------------------

    def require_image(self) -> str:
        """The tag of the current sandbox image, or an error saying how to build it."""
        return require_image(self.client)

    def extract_catalog(self, image: str, cache_dir: Path) -> Path:
        """The node and credential catalog of `image`, copied to `cache_dir`."""
        return extract_catalog(self.client, image, cache_dir)

    # -- containers -------------------------------------------------------------------------

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        limits = spec.limits
        volumes: dict[str, dict[str, str]] = {
            host: {"bind": path, "mode": "rw"} for host, path in spec.binds.items()
        }
        if spec.workspace_volume is not None:
            volumes[spec.workspace_volume] = {"bind": spec.volume_mount, "mode": "rw"}
        options: dict[str, Any] = {
            "name": spec.name,
            "labels": dict(spec.labels),
            "network_mode": limits.network_mode,
            "read_only": limits.read_only,
            "volumes": volumes,
            "environment": dict(spec.environment),
            "cap_drop": list(limits.cap_drop),
            "security_opt": ["no-new-privileges"] if limits.no_new_privileges else [],
            "init": limits.init,
            "user": limits.user,
            "pids_limit": limits.pids_limit,
            "mem_limit": limits.memory_bytes,
            "memswap_limit": limits.memory_bytes,
            "nano_cpus": int(limits.cpus * 1e9),
            "stdin_open": spec.stdin_open,
            "auto_remove": spec.auto_remove,
        }
        if limits.tmp_size:
            # /tmp inside the container, private to it:
            options["tmpfs"] = {"/tmp": f"rw,nosuid,nodev,size={limits.tmp_size},mode=1777"}  # noqa: S108
        if limits.runtime:
            options["runtime"] = limits.runtime
        if limits.runtime == RUNSC:
            options |= _gvisor_limits(limits)
        if spec.working_dir:
            options["working_dir"] = spec.working_dir
        if spec.command is not None:
            options["command"] = spec.command
        with engine_errors("create the sandbox"):
            try:
                container: Container = self.client.containers.create(spec.image, **options)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: another caller created it first
                    raise
                container = self.client.containers.get(spec.name)
        return _info(container)

    def start(self, container_id: str) -> ContainerInfo:
        with engine_errors("start the sandbox"):
            container = self.client.containers.get(container_id)
            container.start()
            container.reload()
        return _info(container)

    def inspect(self, name_or_id: str) -> ContainerInfo | None:
        try:
            with engine_errors("look up the sandbox"):
                return _info(self.client.containers.get(name_or_id))
        except ContainerGoneError:
            return None

    def containers(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        selector = [key if value is None else f"{key}={value}" for key, value in labels.items()]
        with engine_errors("list sandboxes"):
            containers = self.client.containers.list(
                # A container removed while listing (a janitor elsewhere) is no error.
                ignore_removed=True,
                all=True,
                filters={"label": selector},
            )
        return [_info(c) for c in containers]

    def rename(self, container_id: str, name: str) -> bool:
        try:
            with engine_errors("rename a sandbox"):
                self.client.containers.get(container_id).rename(name)
        except ContainerGoneError:
            return False
        except SandboxUnavailableError as exc:
            cause = exc.__cause__
            if isinstance(cause, docker.errors.APIError) and cause.status_code == 409:
                return False
            raise
        return True

    def remove(self, container_id: str) -> None:
        """Remove the container, running or not. A removal the engine is still at when the
        client's timeout (a minute) runs out is waited for, up to REMOVE_WAIT_S more: under
        gVisor, on a machine under load, removing a sandbox after a fork bomb or an OOM kill
        in it took longer than that."""
        try:
            with contextlib.suppress(ContainerGoneError), engine_errors("remove the sandbox"):
                self.client.containers.get(container_id).remove(force=True)
        except SandboxUnavailableError as exc:
            if not isinstance(exc.__cause__, requests.exceptions.ReadTimeout):
                raise
            deadline = time.monotonic() + REMOVE_WAIT_S
            while self.inspect(container_id) is not None:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)

    def kill(self, container_id: str) -> None:
        try:
            with engine_errors("stop the sandbox"):
                container = self.client.containers.get(container_id)
                try:
                    container.kill()
                except docker.errors.APIError as exc:
                    # The engine gave up after its own 10 s because the container's first
                    # process is dead but not reaped yet (seen under gVisor after the host's
                    # OOM killer took part of a sandbox's kernel; it was reaped 0.1 s later).
                    if ZOMBIE not in str(exc.explanation or ""):
                        raise
                # Stopped when this returns: the engine answers the kill before the container
                # is down (under gVisor, a while after), and a start meanwhile would be a no-op
                # on a container about to stop.
                container.wait(timeout=KILL_WAIT_S)
        except ContainerGoneError:
            pass
        except SandboxUnavailableError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, docker.errors.APIError) and cause.status_code == 409):
                raise  # 409: not running, nothing to stop

    def attach(self, container_id: str) -> Attached:
        with engine_errors("attach to a container"):
            wrapper = self.client.api.attach_socket(container_id, params={"stdin": 1, "stream": 1})
        return _Hijacked(wrapper)

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
        with engine_errors("run a process in the sandbox"):
            result = self.client.containers.get(container_id).exec_run(
                argv,
                user=_user(job),
                workdir=workdir,
                environment={**HOME, **(env or {})},
                demux=True,
            )
        stdout, stderr = result.output
        return ExecResult(
            exit_code=int(result.exit_code), stdout=stdout or b"", stderr=stderr or b""
        )

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
        api = self.client.api
        with engine_errors("start a process in the sandbox"):
            exec_id = api.exec_create(
                container_id,
                limits.wrap(argv) if limits else argv,
                stdin=stdin,
                user=_user(job),
                workdir=workdir,
                environment={**HOME, **(env or {})},
            )["Id"]
            # The raw socket, so that it can be closed: the SDK's stream generator leaks it.
            wrapper = api.exec_start(exec_id, socket=True)
        return _Hijacked(wrapper, lambda: api.exec_inspect(exec_id).get("ExitCode"))

    def out_of_memory_since(self, container_id: str, since: float) -> bool:
        # The engine's events up to now (an `until` ahead would wait for it), filtered there.
        filters = {"container": container_id, "event": "oom"}
        with engine_errors("read the engine's events"):
            events = self.client.api.events(
                since=int(since), until=int(time.time()), filters=filters, decode=True
            )
            try:
                return any(True for _ in events)
            finally:
                events.close()

    def copy_in(self, container_id: str, directory: str, archive: bytes) -> None:
        with engine_errors("copy into the sandbox"):
            if not self.client.containers.get(container_id).put_archive(directory, archive):
                raise SandboxUnavailableError(f"copying into {directory} failed")

    def copy_out(self, container_id: str, path: str) -> bytes:
        with engine_errors("copy out of the sandbox"):
            chunks, _stat = self.client.containers.get(container_id).get_archive(path)
            return b"".join(chunks)

    # -- volumes ----------------------------------------------------------------------------

    def volume(self, name: str) -> VolumeInfo | None:
        try:
            with engine_errors("inspect a workspace volume"):
                return _volume(self.client.volumes.get(name))
        except ContainerGoneError:
            return None

    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo:
        with engine_errors("create a workspace volume"):
            return _volume(self.client.volumes.create(name, labels=dict(labels)))

    def volumes(
        self, *, labels: Mapping[str, str] | None = None, name_prefix: str | None = None
    ) -> list[VolumeInfo]:
        filters: dict[str, Any] = {}
        if labels:
            filters["label"] = [f"{k}={v}" for k, v in labels.items()]
        if name_prefix:
            filters["name"] = name_prefix
        with engine_errors("list volumes"):
            found = [_volume(v) for v in self.client.volumes.list(filters=filters)]
        # The engine's name filter matches anywhere in the name.
        return [v for v in found if not name_prefix or v.name.startswith(name_prefix)]

    def remove_volume(self, name: str) -> None:
        with contextlib.suppress(ContainerGoneError), engine_errors("remove a volume"):
            self.client.volumes.get(name).remove(force=True)


def _gvisor_limits(limits: SandboxLimits) -> dict[str, Any]:
    """The host's limits of a gVisor sandbox. Its cgroups count the sandbox's kernel (its
    threads, a host thread per sandboxed thread, its memory) and at a limit that kernel dies
    with every process in it, so they are backstops above what the sandbox's own kernel
    enforces per job (`SandboxProvider.job_limits`): processes counted there (RLIMIT_NPROC,
    the sandbox's count twice over for its own uid, the browser's), the host's pids at
    GVISOR_HOST_PIDS_FACTOR times that, and memory with room for the sandbox's kernel
    itself (GVISOR_KERNEL_MEMORY): the one limit of its memory, whose OOM killer the
    runner watches for (`out_of_memory_since`)."""
    nproc = limits.pids_limit * 2
    memory = limits.memory_bytes + GVISOR_KERNEL_MEMORY
    return {
        "ulimits": [docker.types.Ulimit(name="nproc", soft=nproc, hard=nproc)],
        "pids_limit": limits.pids_limit * GVISOR_HOST_PIDS_FACTOR,
        "mem_limit": memory,
        "memswap_limit": memory,
    }


def _user(job: int | None) -> str:
    return USER if job is None else f"{job}:{USER_UID}"


def _info(container: Container) -> ContainerInfo:
    volume = None
    for mount in container.attrs.get("Mounts", []):
        if mount.get("Destination") in VOLUME_MOUNTS and mount.get("Type") == "volume":
            volume = str(mount.get("Name"))
    return ContainerInfo(
        id=container.id or "",
        name=container.name or "",
        labels=dict(container.labels),
        status=str(container.status),
        workspace_volume=volume,
        runtime=str(container.attrs.get("HostConfig", {}).get("Runtime") or ""),
    )


def _volume(volume: Any) -> VolumeInfo:
    attrs = volume.attrs
    created = attrs.get("CreatedAt")
    made = None
    if created:
        with contextlib.suppress(ValueError):
            made = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    mountpoint = attrs.get("Mountpoint")
    return VolumeInfo(
        name=str(volume.name),
        labels=dict(attrs.get("Labels") or {}),
        created_at=made,
        mountpoint=Path(mountpoint) if mountpoint else None,
    )
