"""Per-thread sandboxes on a container engine: one hardened container and one workspace
volume per thread, their names and labels, the warm pool's names, and what is left behind.

Engine-neutral: it speaks the seam of `engine.py`. Blocking; async callers run it in a
worker thread.

Hardening (each configurable through `SandboxLimits`): no network, read-only root filesystem,
the workspace on a named volume (never a tmpfs: archive uploads into a tmpfs are silently
lost), /tmp a small tmpfs, every capability dropped, no-new-privileges, an init process as
PID 1 (without it orphans become zombies that exhaust the pids limit), uid 1000, pids 512,
1 GiB memory with swap equal, 1 CPU.
"""

from __future__ import annotations

import contextlib
import enum
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sandbox import identity
from sandbox.egress import BRIDGE_PORT, MOUNT_POINT
from sandbox.engine import (
    ContainerEngine,
    ContainerGoneError,
    ContainerInfo,
    ContainerSpec,
    JobLimits,
    SandboxLimits,
    Snapshots,
    WorkerHost,
)
from sandbox.errors import SandboxNotFoundError, SandboxUnavailableError
from sandbox.kinds import THREAD, SandboxKind
from sandbox.runtimes import GVISOR_JOB_TASKS, RUNSC
from sandbox.worker import worker_environment, worker_main_command
from sandbox.workspace_disk import WorkspaceDisks
from sandbox.workspace_seed import SEED_DIR

__all__ = [
    "ORPHAN_GRACE",
    "RestoreFailedError",
    "SandboxInfo",
    "SandboxProvider",
    "Started",
    "remove_egress_dir",
    "remove_owner",
]


class Started(enum.Enum):
    """How `ensure_started` found or brought up a thread's sandbox."""

    RUNNING = "running"  # it ran already: commands of an earlier process may be running
    STARTED = "started"  # started now, afresh or from a template: nothing of before runs
    RESUMED = "resumed"  # a suspended one brought back as it was: initialised already


# The name of a container's egress directory (16 hex digits, its label).
EGRESS_NAME = re.compile(r"[0-9a-f]{16}")

# A volume is made (and its filesystem formatted) before the container that mounts it: one
# younger than this is being set up, not left behind (as is a sandbox being made a template).
ORPHAN_GRACE = timedelta(minutes=2)


class RestoreFailedError(SandboxUnavailableError):
    """A sandbox could not be restored from its template; it is left created, to be started
    cold."""

    def __init__(self, message: str, container: ContainerInfo) -> None:
        super().__init__(message)
        self.container = container


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
    kind: str = "thread"
    labels: dict[str, str] = field(default_factory=dict)
    runtime: str = ""  # the OCI runtime it runs under (sandbox/runtimes.py)


class SandboxProvider:
    """Creates, finds and destroys per-thread sandboxes, all labelled with `owner` so that
    several services (or test runs) sharing one engine never touch each other's."""

    def __init__(
        self,
        engine: ContainerEngine,
        *,
        image: str,
        owner: str = "instance-ai",
        limits: SandboxLimits | None = None,
        egress_root: Path | None = None,
        disks: WorkspaceDisks | None = None,
        orphan_grace: timedelta | None = None,
        kind: SandboxKind = THREAD,
    ) -> None:
        self.engine = engine
        # Which sandboxes are this provider's: its kind's alone (sandbox/kinds.py).
        self.kind = kind
        # A volume younger than this is being set up, never an orphan (see ORPHAN_GRACE).
        self.orphan_grace = ORPHAN_GRACE if orphan_grace is None else orphan_grace
        # Each workspace's own size-limited filesystem (None: the volume as it is).
        self.disks = disks
        self.image = image
        self.owner = owner
        self.limits = limits or SandboxLimits()
        # Each container's own egress directory is created below this (None: no way out).
        self.egress_root = egress_root

    def egress_dir(self, container: ContainerInfo) -> Path | None:
        """The host directory mounted at the container's /run/instance-ai, if any."""
        name = container.labels.get(identity.LABEL_EGRESS)
        if self.egress_root is None or not name:
            return None
        return self.egress_root / str(name)

    def egress_matches(self, container: ContainerInfo) -> bool:
        """Whether the container's way out is this process's: made by a service with another
        data directory, its egress directory is not one this process listens in."""
        name = container.labels.get(identity.LABEL_EGRESS)
        if self.egress_root is None:
            return not name
        return bool(name) and (self.egress_root / str(name)).is_dir()

    @property
    def job_limits(self) -> JobLimits | None:
        """What a command runs under; None where the container's cgroups suffice (runc).
        Under gVisor the host's cgroups see the sandbox's kernel, not its processes, and it
        dies whole at their limits: so each job keeps to GVISOR_JOB_TASKS tasks (at most the
        sandbox's own count; RLIMIT_NPROC counts per uid inside that kernel, where under
        runc it would count the uid across the host). Memory has no such limit there (gVisor
        holds `mmap` to no RLIMIT_DATA, and Node reserves far more address space than it
        uses): the host's cgroup kills a hog, and the runner watches for that
        (`CommandRunner.run`). The container's own limits are above these (docker_engine.py,
        `_gvisor_limits`)."""
        limits = self.limits
        if limits.runtime != RUNSC:
            return None
        return JobLimits(processes=min(limits.pids_limit, GVISOR_JOB_TASKS))

    def runtime_matches(self, container: ContainerInfo) -> bool:
        """Whether the container runs under this provider's runtime (one made before the
        runtime setting changed, or by another service, does not)."""
        wanted = self.limits.runtime
        return wanted is None or container.runtime == wanted

    def fits(self, container: ContainerInfo) -> bool:
        """Whether the container is made as this provider makes them now: its way out and its
        runtime. One that does not is made again (its workspace kept)."""
        return self.egress_matches(container) and self.runtime_matches(container)

    def ensure(self, thread_id: str) -> ContainerInfo:
        """The thread's running sandbox: found, restarted, or created (volume kept). One made
        with another egress layout or runtime is made again around the same workspace."""
        return self.ensure_started(thread_id)[0]

    def ensure_started(
        self, thread_id: str, template: Path | None = None
    ) -> tuple[ContainerInfo, Started]:
        """`ensure`, and how it came up (`Started`). A sandbox made now is restored from
        `template` when one is given (`restore_or_start`)."""
        sid = identity.sandbox_id(thread_id)
        container = self._find(sid)
        volume = identity.volume_name(self.owner, sid)
        if container is not None and not self.fits(container):
            volume = container.workspace_volume or volume  # a claimed pool sandbox's
            self.engine.remove(container.id)
            container = None
        if container is None:
            container = self._create_container(
                identity.container_name(self.owner, sid), volume, self._labels(thread_id, sid)
            )
            return self.restore_or_start(container, template), Started.STARTED
        if container.status == "running":
            return container, Started.RUNNING
        resumed = self.resume(container)
        if resumed is not None:
            return resumed, Started.RESUMED
        return self.start(container), Started.STARTED

    def resume(self, container: ContainerInfo) -> ContainerInfo | None:
        """Bring a suspended sandbox back as it was (engines with snapshots); None when it
        was not suspended or could not be resumed."""
        if not isinstance(self.engine, Snapshots):
            return None
        if container.workspace_volume is not None:
            self._attach_disk(container.workspace_volume)
        return self.engine.resume(container.id)

    def restore_or_start(self, container: ContainerInfo, template: Path | None) -> ContainerInfo:
        """Start a new container: restored from `template` (its processes and memory, the
        container's own mounts) where one is given and the engine keeps snapshots, else
        afresh. A restore that fails raises RestoreFailedError and leaves the container
        created: the caller's next `ensure` starts it cold."""
        if template is None or not isinstance(self.engine, Snapshots):
            return self.start(container)
        if container.workspace_volume is not None:
            self._attach_disk(container.workspace_volume)
        try:
            return self.engine.restore(container.id, template)
        except SandboxUnavailableError as exc:
            raise RestoreFailedError(str(exc), container) from exc

    def start(self, container: ContainerInfo) -> ContainerInfo:
        """Start a created or stopped sandbox, its workspace filesystem mounted first (after
        a host restart it is not)."""
        if container.workspace_volume is not None:
            self._attach_disk(container.workspace_volume)
        return self.engine.start(container.id)

    def still_running(self, container: ContainerInfo) -> bool:
        found = self.engine.inspect(container.id)
        return found is not None and found.status == "running"

    def workspace_free_bytes(self, container: ContainerInfo) -> int | None:
        """Room left in the sandbox's workspace, when it has a size limit."""
        volume = container.workspace_volume
        if self.disks is None or volume is None:
            return None
        data_dir = self._data_dir(volume)
        return None if data_dir is None else self.disks.free_bytes(data_dir)

    def _data_dir(self, volume: str) -> Path | None:
        found = self.engine.volume(volume)
        return found.mountpoint if found is not None else None

    def _attach_disk(self, volume: str) -> None:
        if self.disks is None:
            return
        data_dir = self._data_dir(volume)
        if data_dir is None:
            raise SandboxUnavailableError(
                f"workspace volume {volume} has no directory on this host to limit"
            )
        self.disks.attach(data_dir)

    def _detach_disk(self, volume: str) -> None:
        data_dir = self._data_dir(volume) if self.disks is not None else None
        if self.disks is not None and data_dir is not None:
            self.disks.detach(data_dir)

    def get(self, thread_id: str) -> SandboxInfo | None:
        container = self._find(identity.sandbox_id(thread_id))
        return self._info(container) if container is not None else None

    def container(self, thread_id: str) -> ContainerInfo:
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
            volume = container.workspace_volume or volume
        return self._remove(container, volume)

    def _remove(self, container: ContainerInfo | SandboxInfo | None, volume: str) -> bool:
        """Remove the container, its egress directory and the workspace volume."""
        removed = False
        if container is not None:
            self.engine.remove(
                container.container_id if isinstance(container, SandboxInfo) else container.id
            )
            remove_egress_dir(self.egress_root, container.labels)
            removed = True
        if volume and self.engine.volume(volume) is not None:
            self._detach_disk(volume)
            self.engine.remove_volume(volume)
            removed = True
        return removed

    # -- the warm pool ------------------------------------------------------------------

    def create_pooled(self, template: Path | None = None) -> ContainerInfo:
        """A started sandbox under a pool name, for any thread to claim (restored from
        `template` when one is given: `restore_or_start`)."""
        pool_id = uuid.uuid4().hex
        labels = self._labels("", pool_id) | {identity.LABEL_POOL: "1"}
        name = identity.pool_name(self.owner, pool_id, self.kind.name)
        container = self._create_container(name, identity.volume_name(self.owner, pool_id), labels)
        return self.restore_or_start(container, template)

    def create_template_source(self) -> ContainerInfo:
        """A started sandbox, made cold, to be warmed and saved as a template: as a pool
        member is, under a name of its own (`identity.template_source_name`)."""
        source_id = uuid.uuid4().hex
        name = identity.template_source_name(self.owner, source_id, self.kind.name)
        labels = self._labels("", source_id)
        container = self._create_container(
            name, identity.volume_name(self.owner, source_id), labels
        )
        return self.start(container)

    def pooled(self) -> list[ContainerInfo]:
        """Unclaimed pool sandboxes (claimed ones were renamed away from the pool name)."""
        pool_prefix = identity.pool_name(self.owner, "", self.kind.name)
        found = self.engine.containers(
            {identity.LABEL_OWNER: self.owner, identity.LABEL_POOL: None}
        )
        return [c for c in found if c.name.startswith(pool_prefix) and self.kind.owns(c.labels)]

    def claim(self, thread_id: str, container: ContainerInfo) -> ContainerInfo | None:
        """Give a pooled sandbox to a thread by renaming it to the thread's name. None if
        another claimer (or the thread's own sandbox) got there first."""
        name = identity.container_name(self.owner, identity.sandbox_id(thread_id))
        if not self.engine.rename(container.id, name):
            return None
        return self.engine.inspect(container.id)

    def discard(self, container: ContainerInfo) -> None:
        self._remove(container, container.workspace_volume or "")

    def list_sandboxes(self, *, every_kind: bool = False) -> list[SandboxInfo]:
        """This owner's sandboxes of this kind (`every_kind`: of any kind) that were given
        out (not an unclaimed pool's, nor one being made a template)."""
        found = self.engine.containers({identity.LABEL_OWNER: self.owner})
        return [
            self._info(c)
            for c in found
            if (every_kind or self.kind.owns(c.labels)) and not self._unclaimed(c)
        ]

    def stale_template_sources(self) -> list[SandboxInfo]:
        """Sandboxes being made templates for longer than `orphan_grace` (a few seconds is
        usual): left by a process that died making one."""
        prefix = identity.template_source_name(self.owner, "", self.kind.name)
        found = self.engine.containers({identity.LABEL_OWNER: self.owner})
        made_before = datetime.now(UTC) - self.orphan_grace
        infos = [self._info(c) for c in found if c.name.startswith(prefix)]
        return [i for i in infos if i.created_at is not None and i.created_at < made_before]

    def _unclaimed(self, container: ContainerInfo) -> bool:
        kind = _kind_of(container.labels)
        return container.name.startswith(
            (
                identity.pool_name(self.owner, "", kind),
                identity.template_source_name(self.owner, "", kind),
            )
        )

    def remove(self, info: SandboxInfo) -> None:
        """Remove a listed sandbox and its workspace (whether or not it has a thread label)."""
        self._remove(info, info.volume_name)

    def orphan_volumes(self) -> list[str]:
        """Workspace volumes of this owner with no container. Found by label and by name:
        the engine silently creates a missing named volume, unlabelled, when a container that
        mounts it is created."""
        volumes = self.engine.volumes(labels={identity.LABEL_OWNER: self.owner})
        prefix = identity.volume_name(self.owner, "")
        volumes += [v for v in self.engine.volumes(name_prefix=prefix) if not v.labels]
        mounted = {
            c.workspace_volume for c in self.engine.containers({identity.LABEL_OWNER: self.owner})
        }
        now = datetime.now(UTC)
        return [
            v.name
            for v in volumes
            if v.name not in mounted
            and not (v.created_at is not None and now - v.created_at < self.orphan_grace)
        ]

    def orphan_egress_dirs(self) -> list[str]:
        """Egress directories no container names (their container was removed by someone
        else: `docker rm`, a test's clean-up). One younger than ORPHAN_GRACE may be for a
        container being made."""
        if self.egress_root is None or not self.egress_root.is_dir():
            return []
        named = {
            c.labels.get(identity.LABEL_EGRESS)
            for c in self.engine.containers({identity.LABEL_EGRESS: None})
        }
        oldest = (datetime.now(UTC) - self.orphan_grace).timestamp()
        return sorted(
            d.name
            for d in self.egress_root.iterdir()
            if EGRESS_NAME.fullmatch(d.name) and d.name not in named and d.stat().st_mtime < oldest
        )

    def remove_egress_dirs(self, names: Iterable[str]) -> None:
        for name in names:
            remove_egress_dir(self.egress_root, {identity.LABEL_EGRESS: name})

    def close(self) -> None:
        """The egress root goes when nothing is left in it (it may be in /tmp)."""
        if self.egress_root is not None:
            with contextlib.suppress(OSError):
                self.egress_root.rmdir()

    def remove_volume(self, name: str) -> None:
        self._detach_disk(name)
        self.engine.remove_volume(name)

    def _find(self, sid: str) -> ContainerInfo | None:
        container = self.engine.inspect(identity.container_name(self.owner, sid))
        if container is None:
            return None
        if container.labels.get(identity.LABEL_OWNER) != self.owner:
            raise SandboxUnavailableError(
                f"container {container.name} belongs to owner "
                f"{container.labels.get(identity.LABEL_OWNER)!r}, not {self.owner!r}"
            )
        return container

    def _labels(self, thread_id: str, sid: str) -> dict[str, str]:
        labels = {
            identity.LABEL_OWNER: self.owner,
            identity.LABEL_THREAD: thread_id,
            identity.LABEL_SANDBOX: sid,
            identity.LABEL_CREATED: datetime.now(UTC).isoformat(),
            identity.LABEL_IMAGE: self.image,
        }
        if self.kind.name:
            labels[identity.LABEL_KIND] = self.kind.name
        return labels

    def _egress_mount(self, labels: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """A fresh directory of the container's own (bind-mounted) and the proxy variables;
        nothing when egress is off."""
        if self.egress_root is None:
            return {}, {}
        name = uuid.uuid4().hex[:16]  # EGRESS_NAME
        directory = self.egress_root / name
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
        labels[identity.LABEL_EGRESS] = name
        proxy = f"http://127.0.0.1:{BRIDGE_PORT}"
        variables = {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy}
        variables |= {"https_proxy": proxy, "NO_PROXY": "localhost,127.0.0.1"}
        return {str(directory): MOUNT_POINT}, variables

    def _create_container(self, name: str, volume: str, labels: dict[str, str]) -> ContainerInfo:
        binds, environment = self._egress_mount(labels)
        try:
            if self.engine.volume(volume) is None:  # else kept from earlier: reattach
                self.engine.create_volume(volume, labels)
            self._attach_disk(volume)
            # Where the engine reaches the worker through a socket (runsc), the worker is the
            # main process: then it is in a checkpoint, and comes back in a restore. It runs
            # under the job launcher, which starts the sandbox's commands there.
            main, worker_env = None, {}
            if isinstance(self.engine, WorkerHost):
                main, worker_env = worker_main_command(), worker_environment()
            return self.engine.create(
                ContainerSpec(
                    name=name,
                    image=self.image,
                    labels=labels,
                    limits=self.limits,
                    workspace_volume=volume,
                    volume_mount=self.kind.volume_mount,
                    volume_seed=SEED_DIR if self.kind.seeded else None,
                    binds=binds,
                    environment={**self.kind.environment, **environment, **worker_env},
                    working_dir=self.kind.working_dir,
                    command=main,
                    job_launcher=main is not None,
                )
            )
        except BaseException:
            remove_egress_dir(self.egress_root, labels)  # no container will name it
            raise

    def _info(self, container: ContainerInfo) -> SandboxInfo:
        labels = container.labels
        created = labels.get(identity.LABEL_CREATED)
        # A claimed pool sandbox keeps its pool labels: its name says whose it is now.
        sid = identity.sandbox_id_from_name(self.owner, container.name) or labels.get(
            identity.LABEL_SANDBOX, ""
        )
        return SandboxInfo(
            sandbox_id=sid,
            thread_id=labels.get(identity.LABEL_THREAD, ""),
            kind=_kind_of(labels) or "thread",
            container_id=container.id,
            container_name=container.name,
            volume_name=container.workspace_volume or identity.volume_name(self.owner, sid),
            image=labels.get(identity.LABEL_IMAGE, ""),
            status=container.status,
            created_at=datetime.fromisoformat(created) if created else None,
            labels=dict(labels),
            runtime=container.runtime,
        )


def _kind_of(labels: Mapping[str, str]) -> str:
    return labels.get(identity.LABEL_KIND, "")


def remove_egress_dir(root: Path | None, labels: Mapping[str, str]) -> None:
    """Remove the egress directory a container's labels name under `root` (nothing else uses
    it once the container is gone). A label that is not one of ours names nothing."""
    name = labels.get(identity.LABEL_EGRESS, "")
    if root is not None and EGRESS_NAME.fullmatch(name):
        shutil.rmtree(root / name, ignore_errors=True)


def remove_owner(engine: ContainerEngine, owner: str, egress_roots: Iterable[Path] = ()) -> None:
    """Remove every container (with its egress directory under any of `egress_roots`) and
    workspace volume of an owner, labelled or only named (a deployment's uninstall; tests
    and benchmarks clean up with it)."""
    roots = list(egress_roots)
    for container in engine.containers({identity.LABEL_OWNER: owner}):
        engine.remove(container.id)
        for root in roots:
            remove_egress_dir(root, container.labels)
    prefix = identity.volume_name(owner, "")
    volumes = engine.volumes(labels={identity.LABEL_OWNER: owner})
    volumes += engine.volumes(name_prefix=prefix)
    for volume in volumes:
        with contextlib.suppress(ContainerGoneError):
            if volume.mountpoint is not None:
                WorkspaceDisks.detach(volume.mountpoint)
            engine.remove_volume(volume.name)
