"""A size limit for each workspace that no command can exceed: its own ext4 filesystem.

Docker's named volumes have no size on this engine (volume quotas need an XFS data root with
project quotas and a newer engine), and a command once wrote 1.5 GB in 2.5 s into one. So
each workspace volume gets a filesystem of its own: a sparse image file of the limit's size
beside the volume's data directory (inside the volume's own folder, so it goes with the
volume), loop-mounted *on* that data directory before a container that uses the volume
starts. The engine then bind-mounts the data directory into the container as always, and the
kernel answers `ENOSPC` at the limit. Sparse and mounted with `discard`: the host's disk holds
only what the workspace holds.

This needs what the egress bind mounts already need, plus root: the service runs on the
engine's host and can mount there. A workspace from before the limit keeps its files: they
are copied into its new filesystem first.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import structlog

from sandbox.errors import SandboxUnavailableError
from sandbox.image.rootfs import USER_UID

__all__ = ["IMAGE_NAME", "LOCK_NAME", "MOUNT_OPTIONS", "WorkspaceDisks"]

log = structlog.get_logger(__name__)

IMAGE_NAME = "workspace.ext4"
LOCK_NAME = "workspace.lock"
MOUNT_OPTIONS = "loop,discard,nosuid,nodev"


class WorkspaceDisks:
    """`attach(data_dir)` before a container using the volume starts; `detach(data_dir)`
    before the volume is removed. Both are idempotent."""

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = size_bytes

    @property
    def size_mib(self) -> int:
        return self.size_bytes // (1024 * 1024)

    def check(self) -> None:
        """SandboxUnavailableError saying what to do when limits cannot be enforced here."""
        missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool) is None]
        if os.geteuid() != 0 or missing:
            reason = f"{', '.join(missing)} missing" if missing else "the service is not root"
            raise SandboxUnavailableError(
                f"workspace size limits need loop-mounted filesystems on the engine's host "
                f"({reason}): run the service as root there (with e2fsprogs and mount), or set "
                "INSTANCE_AI_SANDBOX_WORKSPACE_MAX_MB=0 to run without a limit"
            )

    def attach(self, data_dir: Path) -> None:
        if os.path.ismount(data_dir):
            return
        # One attach at a time per volume, across processes (a CLI command beside the service).
        with (data_dir.parent / LOCK_NAME).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.ismount(data_dir):
                self._attach(data_dir)

    def _attach(self, data_dir: Path) -> None:
        image = data_dir.parent / IMAGE_NAME
        fresh = not image.exists()
        if fresh:
            self._make_image(image)
            if any(data_dir.iterdir()):  # a workspace from before the limit
                try:
                    self._move_files_into(image, data_dir)
                except SandboxUnavailableError as exc:
                    image.unlink()  # the files stay where they were
                    raise SandboxUnavailableError(
                        f"{exc}; the workspace may hold more than the {self.size_mib} MiB "
                        "limit (INSTANCE_AI_SANDBOX_WORKSPACE_MAX_MB)"
                    ) from exc
        self._run(["mount", "-o", MOUNT_OPTIONS, str(image), str(data_dir)], "mount")
        if fresh:
            # The root of the new filesystem is the workspace: the sandbox user's, group
            # writable and setgid like the image's own folder (see rootfs.py).
            shutil.rmtree(data_dir / "lost+found", ignore_errors=True)
            os.chown(data_dir, USER_UID, USER_UID)
            data_dir.chmod(0o2775)

    @staticmethod
    def detach(data_dir: Path) -> None:
        if os.path.ismount(data_dir):
            # Lazy: the engine may still hold the mount for a moment after a removal.
            WorkspaceDisks._run(["umount", "--lazy", str(data_dir)], "unmount")

    @staticmethod
    def free_bytes(data_dir: Path) -> int | None:
        """What is left on a mounted workspace, or None when it has no filesystem of its own."""
        if not os.path.ismount(data_dir):
            return None
        stat = os.statvfs(data_dir)
        return stat.f_bavail * stat.f_frsize

    def _make_image(self, image: Path) -> None:
        partial = image.with_suffix(".partial")
        with partial.open("wb") as file:
            file.truncate(self.size_bytes)  # sparse
        # No blocks reserved for root (nothing in the sandbox is root); inode tables are
        # initialised lazily, so making one takes milliseconds.
        self._run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard", str(partial)], "format")
        partial.rename(image)

    def _move_files_into(self, image: Path, data_dir: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="instance-ai-ws-") as staging:
            self._run(["mount", "-o", MOUNT_OPTIONS, str(image), staging], "mount")
            try:
                self._run(["cp", "-a", f"{data_dir}/.", staging], "copy the workspace into")
            finally:
                self._run(["umount", staging], "unmount")
        for entry in data_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        log.info("workspace moved onto its own filesystem", volume=str(data_dir.parent.name))

    @staticmethod
    def _run(argv: list[str], what: str) -> None:
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise SandboxUnavailableError(
                f"could not {what} a workspace filesystem: {result.stderr.strip()[-500:]}"
            )
