"""Templates: for each image, sandbox kind and readiness, the checkpoint of a warm sandbox that
new sandboxes of that kind are restored from (on an engine that keeps snapshots: the runsc
engine). A restore costs a fraction of a cold start and its warm-up (docs/performance.md).

A template is made once per image, kind, mount layout (a restore needs the mounts its
checkpoint had: with an egress socket or without) and readiness, at first need, by warming a
sandbox made cold as a pool member is (its worker the main process, its compiler, and ready to
verify its engine, loaded), closing its worker's channel and checkpointing it; then that
sandbox is removed. It is kept under the engine's root by image (a new image gets new
templates; the old ones are removed with it) and written whole: made in a directory of its own
and renamed into place, so a half-made template is never restored from. What a restore shares
with its template and its siblings, and why that is safe: docs/security.md ("Sandboxes restored
from templates").
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from sandbox.kinds import SandboxKind
from sandbox.readiness import Readiness

__all__ = ["Templates"]

log = structlog.get_logger(__name__)

# What runsc writes last into a checkpoint's directory: a template without it is not whole.
CHECKPOINT_FILE = "checkpoint.img"
# An image's templates unused this long are removed when another image's are made.
STALE_AFTER_S = 24 * 3600.0


class Templates:
    def __init__(self, root: Path, *, image: str, kind: SandboxKind, egress: bool) -> None:
        self.root = root
        self._image_dir = root / hashlib.sha256(image.encode()).hexdigest()[:16]
        # runsc restores only into the mounts the checkpoint had: the egress socket's too.
        self._name = f"{kind.name or 'thread'}-{'egress' if egress else 'closed'}"
        # Restores that failed (each fell back to a cold start).
        self.failed_restores = 0

    def path(self, readiness: Readiness) -> Path:
        return self._image_dir / f"{self._name}-{readiness.value}"

    def ready(self, readiness: Readiness) -> Path | None:
        """The template's checkpoint, if it has been made (its image's directory is touched:
        it is in use)."""
        path = self.path(readiness)
        if not (path / CHECKPOINT_FILE).is_file():
            return None
        self._image_dir.touch()
        return path

    def save(self, readiness: Readiness, checkpoint: Callable[[Path], None]) -> Path:
        """Make the template with `checkpoint(directory)` into a directory of its own, then
        put it in place (another process that made it first wins)."""
        target = self.path(readiness)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            checkpoint(staging / "image")
            try:
                (staging / "image").rename(target)
            except OSError:
                if self.ready(readiness) is None:
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._forget_other_images()
        log.info("sandbox template made", template=str(target))
        return target

    def discard(self, template: Path) -> None:
        """Forget a template a restore failed from (it is made again at the next need)."""
        self.failed_restores += 1
        shutil.rmtree(template, ignore_errors=True)

    def _forget_other_images(self) -> None:
        """Templates of other images not used for a day go (a service of another version on
        this host keeps its own meanwhile)."""
        stale = time.time() - STALE_AFTER_S
        for directory in self.root.iterdir():
            if directory == self._image_dir or directory.name.startswith("."):
                continue
            if directory.stat().st_mtime < stale:
                shutil.rmtree(directory, ignore_errors=True)
