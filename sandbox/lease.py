"""The owner lease: the sandboxes of an owner on an engine belong to one deployment.

Two deployments with the same owner would adopt each other's pool, kill each other's commands
and remove each other's sandboxes; the replicas of *one* deployment (processes sharing its
database) share them on purpose. Each live service holds one lease per owner and engine,
labelled with its deployment, held exactly as long as its holding process lives, however it
ends (SIGKILL included), with no heartbeat to miss. A service whose owner has a live lease of
another deployment refuses to start.

- On an engine whose sandboxes may live on another host (Docker), the lease is a small
  container running `cat` on a stdin the holding process keeps attached: when that process
  ends, the engine closes the attach, `cat` sees end of file, and the container stops and
  removes itself (`ContainerLease`).
- On an engine whose sandboxes all live on this host (`HostLeases`: runsc driven directly),
  it is a file the holder keeps locked (`flock`), which the kernel unlocks when the holder
  ends (`FileLease`): no sandbox kernel burning a core's few percent for as long as the
  service lives.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from sandbox import identity
from sandbox.engine import (
    Attached,
    ContainerEngine,
    ContainerInfo,
    ContainerSpec,
    HostLeases,
    SandboxLimits,
)
from sandbox.errors import SandboxOwnerInUseError, SandboxUnavailableError

__all__ = [
    "LABEL_DEPLOYMENT",
    "LABEL_HOLDER",
    "ContainerLease",
    "FileLease",
    "OwnerLease",
    "sweep_dead_leases",
]

# How long a claim waits for the lease of a holder that just died to go away.
RELEASE_WAIT_S = 5.0
LABEL_HOLDER = identity.LABEL_PREFIX + "holder"
LABEL_DEPLOYMENT = identity.LABEL_PREFIX + "deployment"
# A lease file being made is this young at most (see `sweep_dead_leases`).
STAGING_GRACE_S = 60.0
# `cat` needs next to nothing.
LEASE_LIMITS = SandboxLimits(
    user="65534:65534", pids_limit=8, memory_bytes=32 * 1024 * 1024, init=False, tmp_size=""
)


class OwnerLease(ABC):
    """`OwnerLease.acquire(engine, image=..., owner=..., deployment=...)` or
    SandboxOwnerInUseError."""

    @property
    @abstractmethod
    def holder(self) -> str:
        """Who holds it (a process on a host), as another service's refusal names it."""

    @abstractmethod
    def release(self) -> None:
        """Let go (idempotent): the owner is free at once."""

    @abstractmethod
    def _foreign(self) -> str | None:
        """The holder of a live lease on the owner for another deployment, if any."""

    @classmethod
    def acquire(
        cls,
        engine: ContainerEngine,
        *,
        image: str,
        owner: str,
        deployment: str = "",
        holder: str = "",
        wait_s: float = RELEASE_WAIT_S,
    ) -> OwnerLease:
        """Hold a lease on `owner` for `deployment` (empty: a deployment of its own, sharing
        with no one)."""
        holder = holder or f"pid {os.getpid()} on {socket.gethostname()}"
        claim = uuid.uuid4().hex
        deployment = deployment or claim
        lease: OwnerLease
        if isinstance(engine, HostLeases):
            lease = FileLease.hold(engine.lease_root, owner, holder, deployment, claim)
        else:
            lease = ContainerLease.start(engine, image, owner, holder, deployment, claim)
        deadline = time.monotonic() + wait_s
        try:
            while (foreign := lease._foreign()) is not None:
                if time.monotonic() >= deadline:
                    raise SandboxOwnerInUseError(
                        f"the sandbox owner {owner!r} is held by another running instance-ai "
                        f"service of another deployment ({foreign}); "
                        "give this one its own INSTANCE_AI_SANDBOX_OWNER (or leave it unset: "
                        "each database then gets its own), or stop the other"
                    )
                time.sleep(0.2)  # a holder that just died takes a moment to go
        except BaseException:
            lease.release()
            raise
        return lease

    @staticmethod
    def holders(engine: ContainerEngine, owner: str) -> list[str]:
        """The holders of the live leases on `owner`."""
        if isinstance(engine, HostLeases):
            return [held["holder"] for _, held in _live_leases(engine.lease_root, owner)]
        leases = engine.containers({identity.LABEL_LEASE: owner})
        return [lease.labels.get(LABEL_HOLDER, "") for lease in leases if lease.status == "running"]


class ContainerLease(OwnerLease):
    """A lease as a container running `cat`, attached to by its holder."""

    def __init__(self, engine: ContainerEngine, container: ContainerInfo, attached: Attached):
        self._engine = engine
        self._container = container
        self._attached = attached

    @property
    def holder(self) -> str:
        return str(self._container.labels.get(LABEL_HOLDER, ""))

    @classmethod
    def start(
        cls,
        engine: ContainerEngine,
        image: str,
        owner: str,
        holder: str,
        deployment: str,
        claim: str,
    ) -> ContainerLease:
        labels = {identity.LABEL_LEASE: owner, LABEL_HOLDER: holder, LABEL_DEPLOYMENT: deployment}
        container = engine.create(
            ContainerSpec(
                name=identity.lease_name(owner, claim),
                image=image,
                labels=labels,
                limits=LEASE_LIMITS,
                command=["cat"],
                stdin_open=True,
                auto_remove=True,
            )
        )
        attached = None
        try:
            attached = engine.attach(container.id)
            engine.start(container.id)
        except SandboxUnavailableError as exc:
            with contextlib.suppress(SandboxUnavailableError):
                engine.remove(container.id)
            if attached is not None:
                attached.close()
            raise SandboxUnavailableError(f"the engine failed to start a lease: {exc}") from exc
        return cls(engine, container, attached)

    def _foreign(self) -> str | None:
        labels = self._container.labels
        for lease in self._engine.containers({identity.LABEL_LEASE: labels[identity.LABEL_LEASE]}):
            if lease.id == self._container.id or lease.status != "running":
                continue
            if lease.labels.get(LABEL_DEPLOYMENT) != labels[LABEL_DEPLOYMENT]:
                return lease.labels.get(LABEL_HOLDER, "")
        return None

    def release(self) -> None:
        """Closing the attach ends the container; removing it makes the owner free at once."""
        self._attached.close()
        with contextlib.suppress(SandboxUnavailableError):
            self._engine.remove(self._container.id)
        # The engine may be removing it already (it ends with its attach, and a remove then
        # answers "removal already in progress"): wait for that, whatever the remove said.
        deadline = time.monotonic() + RELEASE_WAIT_S
        with contextlib.suppress(SandboxUnavailableError):
            while self._engine.inspect(self._container.id) is not None:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)


class FileLease(OwnerLease):
    """A lease as a file under the engine's lease root that its holder keeps locked: one file
    per holder, `<owner digest>.<claim>.json`, holding its owner, holder and deployment."""

    def __init__(self, path: Path, fd: int, held: dict[str, str]) -> None:
        self._path = path
        self._fd: int | None = fd
        self._held = held

    @property
    def holder(self) -> str:
        return self._held["holder"]

    @classmethod
    def hold(cls, root: Path, owner: str, holder: str, deployment: str, claim: str) -> FileLease:
        root.mkdir(parents=True, exist_ok=True)
        held = {"owner": owner, "holder": holder, "deployment": deployment}
        # Made under a name no listing reads, and renamed into place once locked: a lease
        # listed is never one not locked yet, mistaken for a dead holder's.
        staging = root / f".{claim}"
        fd = os.open(staging, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, json.dumps(held).encode())
            path = root / f"{_owner_digest(owner)}.{claim}.json"
            staging.rename(path)
        except BaseException:
            os.close(fd)
            staging.unlink(missing_ok=True)
            raise
        return cls(path, fd, held)

    def _foreign(self) -> str | None:
        for path, held in _live_leases(self._path.parent, self._held["owner"]):
            if path != self._path and held["deployment"] != self._held["deployment"]:
                return held["holder"]
        return None

    def release(self) -> None:
        if self._fd is None:
            return
        self._path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


def sweep_dead_leases(root: Path) -> int:
    """Remove the lease files of holders that ended (of an owner never used again, a test's,
    nobody would list them); how many."""
    dead = sum(1 for path in root.glob("*.json") if _read_if_held(path) is None)
    # Of holders that died making theirs (not one being made now: it is young).
    for staging in root.glob(".*"):
        with contextlib.suppress(FileNotFoundError):
            if time.time() - staging.stat().st_mtime > STAGING_GRACE_S:
                staging.unlink()
    return dead


def _owner_digest(owner: str) -> str:
    return hashlib.sha256(owner.encode()).hexdigest()[:16]


def _live_leases(root: Path, owner: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """The lease files of `owner` whose holder lives (those of dead holders are removed)."""
    for path in sorted(root.glob(f"{_owner_digest(owner)}.*.json")):
        held = _read_if_held(path)
        if held is not None and held.get("owner") == owner:
            yield path, held


def _read_if_held(path: Path) -> dict[str, str] | None:
    """A lease file's content while its holder holds its lock; a file whose lock is free is
    a dead holder's: removed, and None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # released meanwhile
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: its holder lives
            with contextlib.closing(os.fdopen(os.dup(fd), "rb")) as file:
                held: dict[str, str] = json.loads(file.read())
            return held
        path.unlink(missing_ok=True)
        return None
    finally:
        os.close(fd)
