"""Containers and volumes kept as files, for engines that have no daemon to keep them: the
local engine and the runsc engine. A container is a JSON record (`containers/<id>.json`,
written whole and renamed into place), a volume a directory with a JSON record beside it
(`volumes/<name>.json`): its data in `volumes/<name>/<data_subdir>` (the runsc engine's
`_data`, as Docker lays out its own, so that a workspace disk's image sits beside the data in
the volume's own directory, workspace_disk.py; the local engine's directly in it). Claims
(creating a name, renaming) are taken under one lock file, across processes: two services
sharing a root never both get a name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandbox.engine import ContainerGoneError, ContainerInfo, VolumeInfo

__all__ = ["ContainerRecord", "RecordStore", "RecordVolumes"]

_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(kw_only=True)
class ContainerRecord:
    id: str
    name: str
    labels: dict[str, str]
    status: str
    workspace_volume: str | None
    # Container path → host directory, read-write.
    binds: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    # What the engine itself needs to start it again (its spec, in its own terms).
    engine: dict[str, Any] = field(default_factory=dict)
    runtime: str = ""

    def info(self, status: str | None = None) -> ContainerInfo:
        return ContainerInfo(
            id=self.id,
            name=self.name,
            labels=dict(self.labels),
            status=status or self.status,
            workspace_volume=self.workspace_volume,
            runtime=self.runtime,
        )


class RecordStore:
    def __init__(self, root: Path, *, data_subdir: str = "") -> None:
        self.root = root
        self._data_subdir = data_subdir
        self.containers_dir = root / "containers"
        self.volumes_dir = root / "volumes"
        for directory in (self.containers_dir, self.volumes_dir):
            directory.mkdir(parents=True, exist_ok=True)

    # -- containers -------------------------------------------------------------------------

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Creating and renaming are claims: one at a time, across processes."""
        with (self.root / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def records(self) -> list[ContainerRecord]:
        records = []
        for path in self.containers_dir.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, TypeError):
                records.append(ContainerRecord(**json.loads(path.read_text())))
        return records

    def load(self, container_id: str) -> ContainerRecord | None:
        if not _ID.fullmatch(container_id):
            return None
        try:
            data = json.loads((self.containers_dir / f"{container_id}.json").read_text())
            return ContainerRecord(**data)
        except (OSError, ValueError, TypeError):
            return None

    def by_name(self, name: str) -> ContainerRecord | None:
        return next((r for r in self.records() if r.name == name), None)

    def find(self, name_or_id: str) -> ContainerRecord | None:
        return self.load(name_or_id) or self.by_name(name_or_id)

    def require(self, container_id: str) -> ContainerRecord:
        record = self.load(container_id)
        if record is None:
            raise ContainerGoneError(f"sandbox {container_id} is gone")
        return record

    def matching(self, labels: Mapping[str, str | None]) -> list[ContainerRecord]:
        """Records with every label given (a value of None: the label, any value)."""
        return [
            r
            for r in self.records()
            if all(k in r.labels and (v is None or r.labels[k] == v) for k, v in labels.items())
        ]

    def save(self, record: ContainerRecord) -> None:
        path = self.containers_dir / f"{record.id}.json"
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(record)))
        partial.replace(path)

    def rename(self, container_id: str, name: str) -> bool:
        """False when the name is taken or the container is gone."""
        with self.locked():
            record = self.load(container_id)
            if record is None or self.by_name(name) is not None:
                return False
            record.name = name
            self.save(record)
        return True

    def delete(self, container_id: str) -> None:
        (self.containers_dir / f"{container_id}.json").unlink(missing_ok=True)

    def container_dir(self, container_id: str) -> Path:
        """A directory of the container's own (its processes, its bundle), gone with it."""
        return self.containers_dir / container_id

    # -- volumes ----------------------------------------------------------------------------

    def volume(self, name: str) -> VolumeInfo | None:
        data = self._volume_meta(name)
        if data is None:
            return None
        return VolumeInfo(
            name=name,
            labels=dict(data.get("labels") or {}),
            created_at=datetime.fromisoformat(data["created"]),
            mountpoint=self.volume_data(name),
        )

    def volume_data(self, name: str) -> Path:
        return (
            self.volumes_dir / name / self._data_subdir
            if self._data_subdir
            else self.volumes_dir / name
        )

    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo:
        self.volume_data(name).mkdir(parents=True, exist_ok=True)
        meta = {"labels": dict(labels), "created": datetime.now(UTC).isoformat()}
        self._write_volume_meta(name, meta)
        found = self.volume(name)
        assert found is not None
        return found

    def volume_flag(self, name: str, flag: str) -> bool:
        """A flag the engine keeps on a volume (the runsc engine's `filled`)."""
        data = self._volume_meta(name)
        return bool(data and data.get(flag))

    def set_volume_flag(self, name: str, flag: str) -> None:
        data = self._volume_meta(name)
        if data is not None:
            self._write_volume_meta(name, {**data, flag: True})

    def _volume_meta(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.volumes_dir / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _write_volume_meta(self, name: str, meta: dict[str, Any]) -> None:
        path = self.volumes_dir / f"{name}.json"
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(meta))
        partial.replace(path)

    def volumes(
        self, *, labels: Mapping[str, str] | None = None, name_prefix: str | None = None
    ) -> list[VolumeInfo]:
        found = [self.volume(meta.stem) for meta in self.volumes_dir.glob("*.json")]
        return [
            v
            for v in found
            if v is not None
            and (not name_prefix or v.name.startswith(name_prefix))
            and all(v.labels.get(k) == value for k, value in (labels or {}).items())
        ]

    def remove_volume(self, name: str) -> None:
        shutil.rmtree(self.volumes_dir / name, ignore_errors=True)
        (self.volumes_dir / f"{name}.json").unlink(missing_ok=True)


class RecordVolumes:
    """The seam's volume calls for an engine whose volumes are records (`_store`)."""

    _store: RecordStore

    def volume(self, name: str) -> VolumeInfo | None:
        return self._store.volume(name)

    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo:
        return self._store.create_volume(name, labels)

    def volumes(
        self, *, labels: Mapping[str, str] | None = None, name_prefix: str | None = None
    ) -> list[VolumeInfo]:
        return self._store.volumes(labels=labels, name_prefix=name_prefix)

    def remove_volume(self, name: str) -> None:
        self._store.remove_volume(name)
