"""The Docker provider: one hardened container and one workspace volume per thread.

Blocking (the docker SDK is synchronous); async callers run it in a worker thread.

Hardening (each configurable through `SandboxLimits`): no network, read-only root filesystem,
the workspace on a named volume (never a tmpfs: archive uploads into a tmpfs are silently
lost), /tmp a small tmpfs, every capability dropped, no-new-privileges, an init process as
PID 1 (without it orphans become zombies that exhaust the pids limit), uid 1000, pids 512,
1 GiB memory with swap equal, 1 CPU.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.transport.unixconn import UnixHTTPConnection

from sandbox import identity
from sandbox.egress import BRIDGE_PORT, MOUNT_POINT
from sandbox.errors import SandboxNotFoundError, SandboxUnavailableError
from sandbox.image.rootfs import WORKSPACE
from sandbox.workspace_disk import WorkspaceDisks

GIB = 1024**3
# A volume is made (and its filesystem formatted) before the container that mounts it: one
# younger than this is being set up, not left behind.
ORPHAN_GRACE = timedelta(minutes=2)


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    network_mode: str = "none"
    read_only: bool = True
    cap_drop: tuple[str, ...] = ("ALL",)
    no_new_privileges: bool = True
    init: bool = True
    user: str = "1000:1000"
    pids_limit: int = 512  # the sandboxed browser: ~110 tasks, and ~11 more per tab
    memory_bytes: int = GIB
    cpus: float = 1.0
    tmp_size: str = "256m"


@dataclass(frozen=True, kw_only=True)
class SandboxInfo:
    sandbox_id: str
    thread_id: str
    container_id: str
    container_name: str
    volume_name: str
    image: str
    status: str
    created_at: datetime | None
    labels: dict[str, str] = field(default_factory=dict)


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate the docker SDK's errors, and those of the HTTP client under it (a refused or
    cut connection while the engine restarts is not a DockerException), at this boundary."""
    try:
        yield
    except docker.errors.NotFound:
        raise
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


def _probe_unix_socket() -> None:
    """Fail early, and without leaking a socket (docker-py does on a refused connect), when
    the engine's unix socket cannot be reached."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
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


def connect() -> docker.DockerClient:
    """A client for the local engine, or SandboxUnavailableError saying what to do."""
    _probe_unix_socket()
    client = None
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        if client is not None:
            client.close()
        raise SandboxUnavailableError(
            f"cannot reach the Docker engine ({exc}): start dockerd (see README) or set DOCKER_HOST"
        ) from exc
    return client


class DockerProvider:
    """Creates, finds and destroys per-thread sandboxes, all labelled with `owner` so that
    several services (or test runs) sharing one engine never touch each other's."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        image: str,
        owner: str = "instance-ai",
        limits: SandboxLimits | None = None,
        egress_root: Path | None = None,
        disks: WorkspaceDisks | None = None,
        orphan_grace: timedelta | None = None,
    ) -> None:
        self.client = client
        # A volume younger than this is being set up, never an orphan (see ORPHAN_GRACE).
        self.orphan_grace = ORPHAN_GRACE if orphan_grace is None else orphan_grace
        # Each workspace's own size-limited filesystem (None: the volume as it is).
        self.disks = disks
        self.image = image
        self.owner = owner
        self.limits = limits or SandboxLimits()
        # Each container's own egress directory is created below this (None: no way out).
        self.egress_root = egress_root

    def egress_dir(self, container: Container) -> Path | None:
        """The host directory mounted at the container's /run/instance-ai, if any."""
        name = container.labels.get(identity.LABEL_EGRESS)
        if self.egress_root is None or not name:
            return None
        return self.egress_root / str(name)

    def egress_matches(self, container: Container) -> bool:
        """Whether the container's way out is this process's: made by a service with another
        data directory, its egress directory is not one this process listens in."""
        name = container.labels.get(identity.LABEL_EGRESS)
        if self.egress_root is None:
            return not name
        return bool(name) and (self.egress_root / str(name)).is_dir()

    def ensure(self, thread_id: str) -> SandboxInfo:
        """The thread's running sandbox: found, restarted, or created (volume kept). One made
        with another egress layout is made again around the same workspace."""
        sid = identity.sandbox_id(thread_id)
        container = self._find(sid)
        volume = identity.volume_name(self.owner, sid)
        if container is not None and not self.egress_matches(container):
            volume = _workspace_volume(container) or volume  # a claimed pool sandbox's
            with engine_errors("replace the sandbox"):
                container.remove(force=True)
            container = None
        if container is None:
            container = self._create_container(
                identity.container_name(self.owner, sid), volume, self._labels(thread_id, sid)
            )
        if container.status != "running":
            self.start(container)
        return self._info(container)

    def start(self, container: Container) -> None:
        """Start a created or stopped sandbox, its workspace filesystem mounted first (after
        a host restart it is not)."""
        volume = _workspace_volume(container)
        if volume is not None:
            self._attach_disk(volume)
        with engine_errors("start the sandbox"):
            container.start()
            container.reload()

    def workspace_free_bytes(self, container: Container) -> int | None:
        """Room left in the sandbox's workspace, when it has a size limit."""
        volume = _workspace_volume(container)
        if self.disks is None or volume is None:
            return None
        return self.disks.free_bytes(self._data_dir(volume))

    def _data_dir(self, volume: str) -> Path:
        with engine_errors("inspect a workspace volume"):
            return Path(self.client.volumes.get(volume).attrs["Mountpoint"])

    def _attach_disk(self, volume: str) -> None:
        if self.disks is not None:
            self.disks.attach(self._data_dir(volume))

    def _detach_disk(self, volume: str) -> None:
        if self.disks is not None:
            try:
                data_dir = self._data_dir(volume)
            except docker.errors.NotFound:
                return
            self.disks.detach(data_dir)

    def get(self, thread_id: str) -> SandboxInfo | None:
        container = self._find(identity.sandbox_id(thread_id))
        return self._info(container) if container is not None else None

    def container(self, thread_id: str) -> Container:
        found = self._find(identity.sandbox_id(thread_id))
        if found is None:
            raise SandboxNotFoundError(f"thread {thread_id!r} has no sandbox")
        return found

    def destroy(self, thread_id: str) -> bool:
        """Remove the container and its workspace volume. False if there was nothing."""
        sid = identity.sandbox_id(thread_id)
        container = self._find(sid)
        volume = identity.volume_name(self.owner, sid)
        if container is not None:
            volume = _workspace_volume(container) or volume
        return self._remove(container, volume)

    def _remove(self, container: Container | None, volume: str) -> bool:
        removed = False
        with engine_errors("remove the sandbox"):
            if container is not None:
                container.remove(force=True)
                removed = True
            try:
                self._detach_disk(volume)
                self.client.volumes.get(volume).remove(force=True)
                removed = True
            except docker.errors.NotFound:
                pass
        return removed

    # -- the warm pool ------------------------------------------------------------------

    def create_pooled(self) -> Container:
        """A started sandbox under a pool name, for any thread to claim."""
        pool_id = uuid.uuid4().hex
        labels = self._labels("", pool_id) | {identity.LABEL_POOL: "1"}
        name = identity.pool_name(self.owner, pool_id)
        container = self._create_container(name, identity.volume_name(self.owner, pool_id), labels)
        self.start(container)
        return container

    def pooled(self) -> list[Container]:
        """Unclaimed pool sandboxes (claimed ones were renamed away from the pool name)."""
        pool_prefix = identity.pool_name(self.owner, "")
        with engine_errors("list pooled sandboxes"):
            containers = self.client.containers.list(
                # A container removed while listing (a janitor elsewhere) is no error.
                ignore_removed=True,
                all=True,
                filters={"label": [f"{identity.LABEL_OWNER}={self.owner}", identity.LABEL_POOL]},
            )
        return [c for c in containers if (c.name or "").startswith(pool_prefix)]

    def claim(self, thread_id: str, container: Container) -> bool:
        """Give a pooled sandbox to a thread by renaming it to the thread's name. False if
        another claimer (or the thread's own sandbox) got there first."""
        try:
            with engine_errors("claim a pooled sandbox"):
                container.rename(
                    identity.container_name(self.owner, identity.sandbox_id(thread_id))
                )
                container.reload()
        except docker.errors.NotFound:
            return False
        except SandboxUnavailableError as exc:
            if (
                isinstance(exc.__cause__, docker.errors.APIError)
                and exc.__cause__.status_code == 409
            ):
                return False
            raise
        return True

    def discard(self, container: Container) -> None:
        self._remove(container, _workspace_volume(container) or "")

    def list_sandboxes(self) -> list[SandboxInfo]:
        """This owner's sandboxes that belong to a thread (not the unclaimed pool)."""
        pool_prefix = identity.pool_name(self.owner, "")
        with engine_errors("list sandboxes"):
            containers = self.client.containers.list(
                # A container removed while listing (a janitor elsewhere) is no error.
                ignore_removed=True,
                all=True,
                filters={"label": f"{identity.LABEL_OWNER}={self.owner}"},
            )
        return [self._info(c) for c in containers if not (c.name or "").startswith(pool_prefix)]

    def remove(self, info: SandboxInfo) -> None:
        """Remove a listed sandbox and its workspace (whether or not it has a thread label)."""
        try:
            container: Container | None = self.client.containers.get(info.container_id)
        except docker.errors.NotFound:
            container = None
        self._remove(container, info.volume_name)

    def orphan_volumes(self) -> list[str]:
        """Workspace volumes of this owner with no container. Found by label and by name:
        the engine silently creates a missing named volume, unlabelled, when a container that
        mounts it is created."""
        with engine_errors("list volumes"):
            volumes = self.client.volumes.list(
                filters={"label": f"{identity.LABEL_OWNER}={self.owner}"}
            )
            prefix = identity.volume_name(self.owner, "")
            volumes += [
                v
                for v in self.client.volumes.list(filters={"name": prefix})
                if (v.name or "").startswith(prefix) and not v.attrs.get("Labels")
            ]
        with engine_errors("list containers"):
            containers = self.client.containers.list(
                # A container removed while listing (a janitor elsewhere) is no error.
                ignore_removed=True,
                all=True,
                filters={"label": f"{identity.LABEL_OWNER}={self.owner}"},
            )
        mounted = {_workspace_volume(c) for c in containers}
        return [
            v.name
            for v in volumes
            if v.name not in mounted and not _younger(v.attrs, self.orphan_grace)
        ]

    def remove_volume(self, name: str) -> None:
        with engine_errors("remove a volume"):
            self._detach_disk(name)
            self.client.volumes.get(name).remove(force=True)

    def _find(self, sid: str) -> Container | None:
        try:
            with engine_errors("look up the sandbox"):
                name = identity.container_name(self.owner, sid)
                container: Container = self.client.containers.get(name)
        except docker.errors.NotFound:
            return None
        if container.labels.get(identity.LABEL_OWNER) != self.owner:
            raise SandboxUnavailableError(
                f"container {container.name} belongs to owner "
                f"{container.labels.get(identity.LABEL_OWNER)!r}, not {self.owner!r}"
            )
        return container

    def _labels(self, thread_id: str, sid: str) -> dict[str, str]:
        return {
            identity.LABEL_OWNER: self.owner,
            identity.LABEL_THREAD: thread_id,
            identity.LABEL_SANDBOX: sid,
            identity.LABEL_CREATED: datetime.now(UTC).isoformat(),
            identity.LABEL_IMAGE: self.image,
        }

    def _egress_mount(self, labels: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
        """A fresh directory of the container's own (bind-mounted) and the proxy variables;
        nothing when egress is off."""
        if self.egress_root is None:
            return {}, {}
        name = uuid.uuid4().hex[:16]
        directory = self.egress_root / name
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
        labels[identity.LABEL_EGRESS] = name
        proxy = f"http://127.0.0.1:{BRIDGE_PORT}"
        variables = {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy}
        variables |= {"https_proxy": proxy, "NO_PROXY": "localhost,127.0.0.1"}
        return {str(directory): {"bind": MOUNT_POINT, "mode": "rw"}}, variables

    def _create_container(self, name: str, volume: str, labels: dict[str, str]) -> Container:
        limits = self.limits
        egress_mounts, environment = self._egress_mount(labels)
        with engine_errors("create the sandbox"):
            try:
                self.client.volumes.get(volume)  # kept from an earlier container: reattach
            except docker.errors.NotFound:
                self.client.volumes.create(volume, labels=labels)
            self._attach_disk(volume)
            try:
                container: Container = self.client.containers.create(
                    self.image,
                    name=name,
                    labels=labels,
                    network_mode=limits.network_mode,
                    read_only=limits.read_only,
                    volumes={volume: {"bind": WORKSPACE, "mode": "rw"}, **egress_mounts},
                    environment=environment,
                    # /tmp inside the container, private to it:
                    tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmp_size},mode=1777"},  # noqa: S108
                    cap_drop=list(limits.cap_drop),
                    security_opt=["no-new-privileges"] if limits.no_new_privileges else [],
                    init=limits.init,
                    user=limits.user,
                    pids_limit=limits.pids_limit,
                    mem_limit=limits.memory_bytes,
                    memswap_limit=limits.memory_bytes,
                    nano_cpus=int(limits.cpus * 1e9),
                    working_dir=WORKSPACE,
                )
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: another caller created it first
                    raise
                container = self.client.containers.get(name)
        return container

    def _info(self, container: Container) -> SandboxInfo:
        labels = container.labels
        created = labels.get(identity.LABEL_CREATED)
        # A claimed pool sandbox keeps its pool labels: its name says whose it is now.
        sid = identity.sandbox_id_from_name(self.owner, container.name or "") or labels.get(
            identity.LABEL_SANDBOX, ""
        )
        return SandboxInfo(
            sandbox_id=sid,
            thread_id=labels.get(identity.LABEL_THREAD, ""),
            container_id=container.id or "",
            container_name=container.name or "",
            volume_name=_workspace_volume(container) or identity.volume_name(self.owner, sid),
            image=labels.get(identity.LABEL_IMAGE, ""),
            status=container.status,
            created_at=datetime.fromisoformat(created) if created else None,
            labels=dict(labels),
        )


def remove_owner(client: docker.DockerClient, owner: str) -> None:
    """Remove every container and workspace volume of an owner, labelled or only named
    (a deployment's uninstall; tests and benchmarks clean up with it)."""
    selector = {"label": f"{identity.LABEL_OWNER}={owner}"}
    with engine_errors("remove an owner's sandboxes"):
        for container in client.containers.list(all=True, filters=selector, ignore_removed=True):
            container.remove(force=True)
        prefix = identity.volume_name(owner, "")
        volumes = client.volumes.list(filters=selector) + [
            v for v in client.volumes.list(filters={"name": prefix}) if v.name.startswith(prefix)
        ]
        for volume in volumes:
            with contextlib.suppress(docker.errors.NotFound):
                WorkspaceDisks.detach(Path(volume.attrs["Mountpoint"]))
                volume.remove(force=True)


def _younger(attrs: dict[str, Any], age: timedelta) -> bool:
    created = attrs.get("CreatedAt")
    if not created:
        return False
    try:
        made = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        return False
    return datetime.now(UTC) - made < age


def _workspace_volume(container: Container) -> str | None:
    for mount in container.attrs.get("Mounts", []):
        if mount.get("Destination") == WORKSPACE and mount.get("Type") == "volume":
            return str(mount.get("Name"))
    return None
