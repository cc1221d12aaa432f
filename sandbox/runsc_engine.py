"""The runsc engine: sandboxes under gVisor with `runsc` driven directly, over OCI bundles, no
Docker in the path of a container's life (Docker keeps the image, which is exported once per
image: oci.py). It fits the container-engine seam (`engine.py`), so the one manager runs on it.

Why not Docker's runsc runtime: a `docker exec` costs ~100 ms under gVisor where `runsc exec`
costs ~45 ms (`python -m bench.runsc`), and Docker can neither checkpoint to a directory of
ours nor restore into a new container, which idle sandboxes and templates need
(docs/performance.md).

- A container is a record (container_records.py), a bundle directory (`config.json`, its own
  `/etc/hosts` and `/etc/hostname`) and, once started, a runsc sandbox in the state root of
  its owner (`state/<owner digest>/`, so one owner's listing never reads another's).
- A volume is a directory (the workspace disk mounts its ext4 there, as on Docker); on its
  first mount it gets what the image holds at the mount point, owner and mode included, as a
  new Docker volume does.
- Processes are started by the sandbox's job launcher (job_launcher.py), where it has one:
  a fork in the sandbox instead of a runsc process on the host. Else, and for a process
  that needs stdin, `runsc exec` with a process spec of its own (runsc_processes.py).
- A container whose stdin is kept open runs `runsc run` in the foreground with its streams on
  the attach: it ends when the attaching process does. (The owner lease is no container
  here: a file under `leases/` its holder keeps locked, lease.py.)
- Its state is asked of runsc each time (`runsc state`, `runsc list`): a sandbox killed from
  outside, or whose kernel died, is seen as exited at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import docker
import docker.errors
import structlog

from sandbox.container_records import ContainerRecord, RecordStore, RecordVolumes
from sandbox.engine import (
    Attached,
    ContainerGoneError,
    ContainerInfo,
    ContainerSpec,
)
from sandbox.errors import SandboxUnavailableError
from sandbox.identity import LABEL_LEASE, LABEL_OWNER
from sandbox.image.build import require_image
from sandbox.image.catalog import extract_catalog
from sandbox.job_kill import UidJobs
from sandbox.job_launcher import (
    LAUNCHER_LOCK,
    LAUNCHER_SOCKET_DIR,
    JobLaunchers,
)
from sandbox.lease import sweep_dead_leases
from sandbox.oci import ExportedImage, bundle_config, export_image
from sandbox.process_streams import ProcessStreams
from sandbox.runsc_cli import (
    CGROUP_PARENT,
    RUNSC_CALL_S,
    call_runsc,
    delete,
    first_line,
    running_ids,
    runs,
    runsc_argv,
    runsc_usable,
    said,
    state_files,
    sweep_cgroups,
    sweep_state_roots,
)
from sandbox.runsc_processes import RunscProcesses
from sandbox.runsc_removals import Removals, kill_processes
from sandbox.runtimes import RUNSC
from sandbox.worker import WORKER_SOCKET, WORKER_SOCKET_DIR
from sandbox.worker_socket import wait_closed, wait_for_worker
from sandbox.workspace_seed import seed_on_host

__all__ = ["CGROUP_PARENT", "RunscEngine", "runsc_usable"]

log = structlog.get_logger(__name__)

# Each container's own directory for the worker's socket, in its bundle (worker_socket.py).
CONTROL_DIR = "control"
# Locked by the process that holds the worker's channel, in its bundle (`worker_channel`).
WORKER_LOCK = "worker.lock"
# Where a suspended sandbox's checkpoint is kept, in its bundle (`suspend`).
SUSPENDED = "suspended"
# The volume flag of one that got the image's files at its mount point (`_prepare_volume`).
FILLED = "filled"


class RunscEngine(RunscProcesses, RecordVolumes, UidJobs):
    """`ContainerEngine` over `runsc`, with its state under `root`; `docker` keeps the image."""

    runs_image = True

    def __init__(self, docker_client: docker.DockerClient, root: Path) -> None:
        self.client = docker_client
        self.root = root
        self._store = RecordStore(root / "records", data_subdir="_data")
        self._bundles = root / "bundles"
        self._state = root / "state"
        self._rootfs = root / "rootfs"
        for directory in (self._bundles, self._state, self._rootfs):
            directory.mkdir(parents=True, exist_ok=True)
        self._images: dict[str, ExportedImage] = {}
        self._images_lock = threading.Lock()
        # One wait for a container's worker at a time (each makes its socket anew).
        self._channel_locks: dict[str, threading.Lock] = {}
        # Channels to the sandboxes' job launchers.
        self._launchers = JobLaunchers()
        # The runsc state of sandboxes removed, deleted in the background.
        self._removals = Removals()
        # Attaches made before their container started (a `cat` kept on its stdin), by id.
        self._attaches: dict[str, ProcessStreams] = {}
        # Per container: (when, the OOM kills its cgroup had counted then), taken as each
        # process starts, so `out_of_memory_since` can tell a kill after a moment from one
        # before it.
        self._oom_marks: dict[str, list[tuple[float, int]]] = {}
        records = self._store.records()
        # Containers to go when they end, ended (lease containers an earlier version left,
        # whose holder died): of an owner never used again (a test's), nobody would list them.
        ended = [r for r in records if self._removed_if_ended(r, self._status(r))]
        if ended:
            log.info("ended sandboxes that were to go removed", sandboxes=len(ended))
        known = {record.id for record in records}
        # Of sandboxes removed by a service that ended before their deletion did.
        left = {id: root for id, root in state_files(self._state).items() if id not in known}
        for container_id, state in left.items():
            self._removals.delete_later(state, container_id)
        if left:
            log.info("runsc state of removed sandboxes removed", sandboxes=len(left))
        swept = sweep_cgroups(known - {r.id for r in ended})
        if swept:
            log.info("empty cgroups of sandboxes gone removed", cgroups=swept)
        emptied = sweep_state_roots(self._state)
        if emptied:
            log.info("empty runsc state roots of owners gone removed", roots=emptied)
        dead = sweep_dead_leases(self.lease_root)
        if dead:
            log.info("owner leases of services that ended removed", leases=dead)

    @property
    def lease_root(self) -> Path:
        """The owner leases of services on this engine (lease.py: `FileLease`)."""
        return self.root / "leases"

    @property
    def template_root(self) -> Path:
        """Templates are kept beside the images' exports, per image (templates.py)."""
        return self.root / "templates"

    def ping(self) -> None:
        why = runsc_usable()
        if why is not None:
            raise SandboxUnavailableError(why)
        try:
            self.client.ping()
        except docker.errors.DockerException as exc:
            raise SandboxUnavailableError(
                f"the Docker engine that keeps the sandbox image does not answer: {exc}"
            ) from exc

    def close(self) -> None:
        self._launchers.close()
        self._removals.close()
        self.client.close()

    def runtimes(self) -> frozenset[str]:
        return frozenset({RUNSC})

    # -- the image (kept by Docker) ---------------------------------------------------------

    def require_image(self) -> str:
        return require_image(self.client)

    def extract_catalog(self, image: str, cache_dir: Path) -> Path:
        return extract_catalog(self.client, image, cache_dir)

    def exported(self, image: str) -> ExportedImage:
        """The image's root filesystem on this host (exported once per image)."""
        with self._images_lock:
            found = self._images.get(image)
            if found is None:
                found = export_image(self.client, image, self._rootfs)
                self._images[image] = found
                self._forget_other_images(found)
            return found

    def _forget_other_images(self, current: ExportedImage) -> None:
        """Remove the exports of other images that no container uses any more (an image is
        ~1.6 GB on disk; each new image would otherwise leave its predecessor behind)."""
        used = {str(r.engine.get("rootfs", "")) for r in self._store.records()}
        for directory in self._rootfs.iterdir():
            rootfs = directory / "rootfs"
            if (
                rootfs != current.rootfs
                and str(rootfs) not in used
                and not directory.name.startswith(".")
            ):
                log.info("removing an unused image export", directory=str(directory))
                shutil.rmtree(directory, ignore_errors=True)

    # -- containers -------------------------------------------------------------------------

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        image = self.exported(spec.image)
        with self._store.locked():
            existing = self._store.by_name(spec.name)
            if existing is not None:
                return self._info(existing)
            record = ContainerRecord(
                id=self._store.new_id(),
                name=spec.name,
                labels=dict(spec.labels),
                status="created",
                workspace_volume=spec.workspace_volume,
                binds={path: host for host, path in spec.binds.items()},
                environment=dict(spec.environment),
                runtime=RUNSC,
                engine={
                    "state": str(self._state_root(spec.labels)),
                    "stdinOpen": spec.stdin_open,
                    "autoRemove": spec.auto_remove,
                    "volumeMount": spec.volume_mount,
                    "volumeSeed": spec.volume_seed,
                    "rootfs": str(image.rootfs),
                    "jobLauncher": spec.job_launcher,
                },
            )
            self._write_bundle(record, spec, image)
            self._store.save(record)
        return self._info(record)

    def _write_bundle(
        self, record: ContainerRecord, spec: ContainerSpec, image: ExportedImage
    ) -> None:
        bundle = self._bundles / record.id
        etc = bundle / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        hostname = record.id[:12]
        loopback = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        (etc / "hosts").write_text(f"{loopback}127.0.1.1\t{hostname}\n")
        (etc / "hostname").write_text(hostname + "\n")
        volume = self._store.volume(spec.workspace_volume) if spec.workspace_volume else None
        if spec.workspace_volume and volume is None:  # as Docker: a missing volume is made
            volume = self._store.create_volume(spec.workspace_volume, {})
        # The worker's socket: made by the host in the container's own control directory,
        # reached by the sandbox user (worker_channel).
        control = bundle / CONTROL_DIR
        control.mkdir(exist_ok=True)
        control.chmod(0o755)
        binds = {control: WORKER_SOCKET_DIR}
        if spec.job_launcher:
            binds[JobLaunchers.prepare(bundle)] = LAUNCHER_SOCKET_DIR
        config = bundle_config(
            spec,
            image,
            hostname=hostname,
            cgroups_path=f"{CGROUP_PARENT}/{record.id}",
            etc_dir=etc,
            volume_dir=volume.mountpoint if volume is not None else None,
            extra_binds=binds,
        )
        (bundle / "config.json").write_text(json.dumps(config))

    def start(self, container_id: str) -> ContainerInfo:
        record = self._store.require(container_id)
        if self._status(record) == "running":
            return self._info(record)
        self._delete_sandbox(record)  # a stopped one: started anew, as Docker restarts it
        self._prepare_volume(record)
        if self._resume(record):
            return self._started(record)
        attach = self._attaches.pop(record.id, None)
        if attach is not None:
            run = [*self._runsc(record), "run", "--bundle", str(self._bundles / record.id)]
            process = self._popen([*run, record.id], stdin=True)
            attach.run(process, on_exit=lambda: self._ended(record.id))
            _wait_until_running(record.id, process)
        else:
            self._launch(record, ["run"], "start")
        return self._started(record)

    def checkpoint(self, container_id: str, image_dir: Path, *, leave_running: bool) -> None:
        """Save the running sandbox (its memory, its processes, its /tmp) to `image_dir`;
        with `leave_running` it runs on, else it ends. Uncompressed: a restore then reads the
        pages as they are (runsc's default, flate, costs each restore its inflation). A
        sandbox with a process whose streams are the host's (one started by `runsc exec`, not
        by its job launcher) is saved but cannot be restored: those streams are not in the
        image."""
        record = self._store.require(container_id)
        # The launcher's channel, opened if it was not, then closed: no channel to the host is
        # in the image, and a launcher tries again every 20 ms after a channel ends (every
        # 250 ms once long unheard), so a restored one is there at the first command.
        with contextlib.suppress(SandboxUnavailableError):
            self._launcher(record)
        self._launchers.forget(record.id)
        # Nor may any socket of the sandbox's be connected to the host still (gVisor cannot
        # save one, and the checkpoint that meets one takes the sandbox down): the channels
        # let go (the launcher's, the worker's) wait for the far end to close.
        bundle = self._bundles / record.id
        for lock in (bundle / LAUNCHER_LOCK, bundle / WORKER_LOCK):
            if not wait_closed(lock):
                raise SandboxUnavailableError(
                    "a process in the sandbox still holds a channel to the host; not saved"
                )
        image_dir.mkdir(parents=True, exist_ok=True)
        argv = [*self._runsc(record), "checkpoint", f"--image-path={image_dir}"]
        argv += ["--compression=none", *(["--leave-running"] if leave_running else [])]
        done = call_runsc([*argv, record.id], "checkpoint the sandbox")
        if done.returncode != 0:
            raise SandboxUnavailableError(
                f"runsc could not checkpoint the sandbox: {said(done.stderr)}"
            )
        if not leave_running:
            self._delete_sandbox(record)

    def suspend(self, container_id: str) -> None:
        """Stop the sandbox keeping all of it: checkpointed into its bundle (it goes with the
        container), its processes ended, no CPU and no memory held; the next `start` restores
        it, processes, memory and `/tmp` as they were."""
        record = self._store.require(container_id)
        target = self._bundles / container_id / SUSPENDED
        staging = target.with_name(SUSPENDED + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        self.checkpoint(container_id, staging, leave_running=False)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        log.debug("sandbox suspended", container=record.name)

    def resume(self, container_id: str) -> ContainerInfo | None:
        record = self._store.require(container_id)
        if self._status(record) == "running" or not self._suspended(record):
            return None
        self._delete_sandbox(record)
        self._prepare_volume(record)
        return self._started(record) if self._resume(record) else None

    def _suspended(self, record: ContainerRecord) -> bool:
        return (self._bundles / record.id / SUSPENDED / "checkpoint.img").is_file()

    def _resume(self, record: ContainerRecord) -> bool:
        """Restore a suspended sandbox (its checkpoint is used once, then removed). False when
        it was not suspended, or its restore failed (logged: it then starts afresh)."""
        suspended = self._bundles / record.id / SUSPENDED
        if not self._suspended(record):
            return False
        try:
            self._launch(record, ["restore", f"--image-path={suspended}"], "resume")
        except SandboxUnavailableError as exc:
            log.warning("resuming a suspended sandbox failed; starting it afresh", reason=str(exc))
            return False
        finally:
            shutil.rmtree(suspended, ignore_errors=True)
        return True

    def restore(self, container_id: str, image_dir: Path) -> ContainerInfo:
        """Start a created container from a checkpoint instead of afresh: the image's
        processes, memory and /tmp, with this container's own mounts (its volume, its
        egress directory, its /etc files) at the same places. Any number of containers can
        be restored from one image: it is read, not consumed."""
        record = self._store.require(container_id)
        self._delete_sandbox(record)
        self._prepare_volume(record)
        self._launch(record, ["restore", f"--image-path={image_dir}"], "restore")
        return self._started(record)

    def _launch(self, record: ContainerRecord, command: list[str], what: str) -> None:
        """`runsc <command> --detach` of the record's bundle. Its stdio go to a file, never a
        pipe: the sandbox keeps them open as long as it runs, so a pipe would never end.
        Its job launcher, if any, is awaited from before the launch."""
        bundle = self._bundles / record.id
        log_path = bundle / "runsc.log"
        launching = threading.Event()
        launching.set()
        if record.engine.get("jobLauncher"):

            def running() -> bool:
                return launching.is_set() or runs(record.id) is True

            self._launchers.expect(record.id, bundle, running)
        try:
            with log_path.open("wb") as output:
                done = call_runsc(
                    [*self._runsc(record), *command, "--detach", f"--bundle={bundle}", record.id],
                    what,
                    output=output,
                )
        finally:
            launching.clear()
        if done.returncode != 0:
            with contextlib.suppress(SandboxUnavailableError):
                self._delete_sandbox(record, even_unstarted=True)
            reason = first_line(log_path.read_bytes())
            raise SandboxUnavailableError(f"runsc could not {what} the sandbox: {reason}")

    def _started(self, record: ContainerRecord) -> ContainerInfo:
        with self._store.locked():
            record = self._store.require(record.id)
            record.status = "running"
            self._store.save(record)
        self._mark_memory(record)
        return self._info(record)

    def _ended(self, container_id: str) -> None:
        """The foreground `runsc run` of an attached container returned."""
        record = self._store.load(container_id)
        if record is not None and record.engine.get("autoRemove"):
            self.remove(container_id)

    def inspect(self, name_or_id: str) -> ContainerInfo | None:
        record = self._store.find(name_or_id)
        if record is None:
            return None
        info = self._info(record)
        return None if self._removed_if_ended(record, info.status) else info

    def containers(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        records = self._store.matching(labels)
        running = self._running_ids(records)
        found = []
        for record in records:
            status = self._status(record, running)
            if not self._removed_if_ended(record, status):
                found.append(record.info(status))
        return found

    def _removed_if_ended(self, record: ContainerRecord, status: str) -> bool:
        """Remove a container that was to go when it ended and has (its holder died before it
        could remove it: a `cat` on its stdin ends with its holder). True if removed."""
        ended = status != "running" and record.status != "created"
        if ended and record.engine.get("autoRemove"):
            self.remove(record.id)
            return True
        return False

    def rename(self, container_id: str, name: str) -> bool:
        return self._store.rename(container_id, name)

    def remove(self, container_id: str) -> None:
        """Gone once this returns: its processes killed, its record, bundle and caches;
        its runsc state and cgroups go in the background (runsc_removals.py)."""
        record = self._store.load(container_id)
        if record is None:
            return
        if record.status != "created" and kill_processes(record.id):
            self._launchers.forget(record.id)
            self._removals.delete_later(_state(record), record.id)
        else:
            self._delete_sandbox(record)
        with self._store.locked():
            self._store.delete(container_id)
        shutil.rmtree(self._bundles / container_id, ignore_errors=True)
        self._oom_marks.pop(container_id, None)
        self._channel_locks.pop(container_id, None)

    def kill(self, container_id: str) -> None:
        record = self._store.load(container_id)
        if record is not None:
            self._delete_sandbox(record)

    def attach(self, container_id: str) -> Attached:
        record = self._store.require(container_id)
        if not record.engine.get("stdinOpen") or record.status != "created":
            raise SandboxUnavailableError(
                "only a created container whose stdin is kept open can be attached to"
            )
        streams = ProcessStreams()
        self._attaches[container_id] = streams
        return streams

    def worker_channel(self, container_id: str, timeout_s: float) -> Attached:
        """The container's main worker, connected: listen on its socket (made anew, for the
        sandbox user) until the worker connects or `timeout_s` runs out, then no more."""
        record = self._store.require(container_id)
        bundle = self._bundles / container_id
        path = bundle / CONTROL_DIR / Path(WORKER_SOCKET).name
        with self._images_lock:
            lock = self._channel_locks.setdefault(container_id, threading.Lock())
        with lock:  # one wait at a time: each makes the socket anew
            return wait_for_worker(
                path, bundle / WORKER_LOCK, timeout_s, lambda: self._status(record) == "running"
            )

    # -- plumbing ---------------------------------------------------------------------------

    @staticmethod
    def _runsc(record: ContainerRecord) -> list[str]:
        return runsc_argv(_state(record))

    def _state_root(self, labels: Mapping[str, str]) -> Path:
        owner = labels.get(LABEL_OWNER) or labels.get(LABEL_LEASE) or ""
        return self._state / hashlib.sha256(owner.encode()).hexdigest()[:16]

    def _status(self, record: ContainerRecord, running: set[str] | None = None) -> str:
        if record.status == "created":
            return "created"
        if running is None:
            running = self._running_ids([record])
        return "running" if record.id in running else "exited"

    @staticmethod
    def _running_ids(records: list[ContainerRecord]) -> set[str]:
        """Which of the records' sandboxes run: read from their cgroups (each asked status
        once per API call, so a `runsc list`, ~20 ms, each time would be most of a short
        command's time), else runsc's listing (one per state root)."""
        found: set[str] = set()
        unknown: list[ContainerRecord] = []
        for record in records:
            alive = runs(record.id)
            if alive is None:
                unknown.append(record)
            elif alive:
                found.add(record.id)
        if unknown:
            found |= running_ids({_state(record) for record in unknown})
        return found

    def _info(self, record: ContainerRecord) -> ContainerInfo:
        return record.info(self._status(record))

    def _delete_sandbox(self, record: ContainerRecord, *, even_unstarted: bool = False) -> None:
        """Kill and forget the record's runsc sandbox, if any (its cgroup goes with it); one
        never started has none, unless a start of it failed half-way (`even_unstarted`)."""
        self._launchers.forget(record.id)
        if record.status == "created" and not even_unstarted:
            return
        delete(_state(record), record.id)

    def _prepare_volume(self, record: ContainerRecord) -> None:
        """A volume's first mount gets what the image holds at its mount point (as Docker
        fills a new volume); later mounts find the volume as it was left."""
        if record.workspace_volume is None:
            return
        volume = self._store.volume(record.workspace_volume)
        if volume is None or volume.mountpoint is None:
            raise ContainerGoneError(f"the volume {record.workspace_volume} is gone")
        if self._store.volume_flag(volume.name, FILLED):
            return
        rootfs = Path(str(record.engine["rootfs"]))
        source = rootfs / str(record.engine.get("volumeMount", "")).lstrip("/")
        if source.is_dir():
            subprocess.run(
                ["cp", "-a", "--no-clobber", f"{source}/.", str(volume.mountpoint)],
                capture_output=True,
                check=True,
            )
            stat = source.stat()
            os.chown(volume.mountpoint, stat.st_uid, stat.st_gid)
            volume.mountpoint.chmod(stat.st_mode & 0o7777)
        seed = record.engine.get("volumeSeed")
        if seed:
            seed_on_host(rootfs / str(seed).lstrip("/"), volume.mountpoint)
        self._store.set_volume_flag(volume.name, FILLED)


def _wait_until_running(container_id: str, process: subprocess.Popen[bytes]) -> None:
    """Return once a foreground `runsc run` has its sandbox's processes up. Its status is
    read from the sandbox's cgroup, which is empty until then: a container listed meanwhile
    would look ended (and one to be removed when it ends would be removed)."""
    deadline = time.monotonic() + RUNSC_CALL_S
    while runs(container_id) is False:
        if process.poll() is not None:
            raise SandboxUnavailableError(
                f"runsc could not start the sandbox: it ended at once (exit {process.returncode})"
            )
        if time.monotonic() >= deadline:
            raise SandboxUnavailableError("runsc did not start the sandbox in time")
        time.sleep(0.01)


def _state(record: ContainerRecord) -> Path:
    """The runsc state root the record's sandbox lives in (its owner's)."""
    return Path(str(record.engine["state"]))
