"""Making a started sandbox ready for work: its egress bridge running, its workspace seeded.

Run once per container start (and after a restore): the egress bridge (127.0.0.1:3128 → the
mounted proxy socket) starts detached from the exec that starts it, then a thread sandbox's
workspace is seeded from the image's `seed/` and marked; one that has the marker is never seeded
again, so a restart or a reattach keeps the user's files. An engine that fills volumes on the
host (runsc) seeds a new workspace there before its sandbox starts (`ContainerSpec.volume_seed`),
so the exec finds it marked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from sandbox.egress import MOUNT_POINT
from sandbox.engine import ContainerEngine, ContainerInfo
from sandbox.errors import SandboxUnavailableError
from sandbox.image.rootfs import APP_DIR, USER_UID, WORKSPACE
from sandbox.kinds import SandboxKind

__all__ = ["BRIDGE_PID", "MARKER", "SEED_DIR", "initialise", "seed_on_host"]

MARKER = ".sandbox-initialized"
SEED_DIR = f"{APP_DIR}/seed"
BRIDGE_PID = "/tmp/egress-bridge.pid"  # noqa: S108 - the container's private /tmp
# The pid file is checked to name the bridge itself: a sandbox restored from a template has the
# template's /tmp, and that pid may be another process there (or none).
_START_BRIDGE = (
    f"if [ -d {MOUNT_POINT} ] && "
    f'! grep -qs egress-bridge "/proc/$(cat {BRIDGE_PID} 2>/dev/null)/cmdline"; then '
    f"setsid node {APP_DIR}/bin/egress-bridge.mjs </dev/null >/dev/null 2>&1 & "
    f"echo $! > {BRIDGE_PID}; fi; "
)
# Group-writable: commands run as job uids in group 1000 and must be able to edit the seed.
_SEED = (
    _START_BRIDGE + f"[ -e {MARKER} ] && exit 0; umask 002; cp -R -n {SEED_DIR}/. . && "
    f"chmod -R g+w . && touch {MARKER}"
)
# A service sandbox is not seeded (n8n writes its own workspace and marker): its home is
# made group-writable once, for the job uids of its commands (group 1000), and the
# workspace directory n8n expects is there.
_UNSEEDED = _START_BRIDGE + f"umask 002; chmod g+w . 2>/dev/null; mkdir -p {WORKSPACE}"


def initialise(engine: ContainerEngine, kind: SandboxKind, container: ContainerInfo) -> None:
    """Start the bridge and seed the workspace (once) of a running sandbox of `kind`."""
    script = _SEED if kind.seeded else _UNSEEDED
    result = engine.exec(container.id, ["sh", "-c", script], workdir=kind.working_dir)
    if result.exit_code != 0:
        output = (result.stdout + result.stderr).decode(errors="replace")
        raise SandboxUnavailableError(f"initialising the workspace failed: {output}")


def seed_on_host(seed: Path, volume: Path) -> None:
    """Seed a new workspace on the host as the seeding exec would inside (workspace_seed.py):
    the seed's files, kept where the volume has one already, owned by the sandbox user,
    group-writable (commands run as job uids of its group), directories setgid as the
    workspace is; then the mark, so the exec seeds nothing."""
    for directory, subdirectories, names in os.walk(seed):
        relative = Path(directory).relative_to(seed)
        for name in subdirectories:
            target = volume / relative / name
            with contextlib.suppress(FileExistsError):
                target.mkdir()
                os.chown(target, USER_UID, USER_UID)
                target.chmod(0o2775)
        for name in names:
            target = volume / relative / name
            if target.exists() or target.is_symlink():
                continue
            shutil.copyfile(Path(directory) / name, target, follow_symlinks=False)
            os.chown(target, USER_UID, USER_UID, follow_symlinks=False)
            if not target.is_symlink():
                target.chmod(((Path(directory) / name).stat().st_mode | 0o020) & 0o775)
    marker = volume / MARKER
    marker.touch(mode=0o664)
    os.chown(marker, USER_UID, USER_UID)
    marker.chmod(0o664)  # as the exec's touch under umask 002 makes it
