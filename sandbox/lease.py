"""The owner lease: the sandboxes of an owner on an engine belong to one deployment.

Two deployments with the same owner would adopt each other's pool, kill each other's commands
and remove each other's sandboxes; the replicas of *one* deployment (processes sharing its
database) share them on purpose. Each live service holds one small lease container per owner,
labelled with its deployment, running `cat` on a stdin that the holding process keeps
attached. When that process ends, however it ends (SIGKILL included), the engine closes the
attach, `cat` sees end of file, and the container stops and removes itself: a lease is held
exactly as long as its holder lives, with no heartbeat to miss. A service whose owner has a
live lease of another deployment refuses to start.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid

from sandbox import identity
from sandbox.engine import (
    Attached,
    ContainerEngine,
    ContainerInfo,
    ContainerSpec,
    SandboxLimits,
)
from sandbox.errors import SandboxOwnerInUseError, SandboxUnavailableError

__all__ = ["LABEL_DEPLOYMENT", "LABEL_HOLDER", "OwnerLease"]

# How long a claim waits for the lease of a holder that just died to go away.
RELEASE_WAIT_S = 5.0
LABEL_HOLDER = identity.LABEL_PREFIX + "holder"
LABEL_DEPLOYMENT = identity.LABEL_PREFIX + "deployment"
# `cat` needs next to nothing.
LEASE_LIMITS = SandboxLimits(
    user="65534:65534", pids_limit=8, memory_bytes=32 * 1024 * 1024, init=False, tmp_size=""
)


class OwnerLease:
    """`OwnerLease.acquire(engine, image=..., owner=..., deployment=...)` or
    SandboxOwnerInUseError."""

    def __init__(self, engine: ContainerEngine, container: ContainerInfo, attached: Attached):
        self._engine = engine
        self._container = container
        self._attached = attached

    @property
    def holder(self) -> str:
        return str(self._container.labels.get(LABEL_HOLDER, ""))

    @property
    def name(self) -> str:
        return self._container.name

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
        lease = cls._start(engine, image, owner, holder, deployment or claim, claim)
        deadline = time.monotonic() + wait_s
        try:
            while (foreign := lease._foreign(owner)) is not None:
                if time.monotonic() >= deadline:
                    raise SandboxOwnerInUseError(
                        f"the sandbox owner {owner!r} is held by another running instance-ai "
                        f"service of another deployment ({foreign.labels.get(LABEL_HOLDER)}); "
                        "give this one its own INSTANCE_AI_SANDBOX_OWNER (or leave it unset: "
                        "each database then gets its own), or stop the other"
                    )
                time.sleep(0.2)  # a holder that just died takes a moment to go
        except BaseException:
            lease.release()
            raise
        return lease

    @classmethod
    def _start(
        cls,
        engine: ContainerEngine,
        image: str,
        owner: str,
        holder: str,
        deployment: str,
        claim: str,
    ) -> OwnerLease:
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

    def _foreign(self, owner: str) -> ContainerInfo | None:
        """A running lease on `owner` held for another deployment, if any."""
        ours = self._container.labels.get(LABEL_DEPLOYMENT)
        for lease in self._engine.containers({identity.LABEL_LEASE: owner}):
            if lease.id == self._container.id or lease.status != "running":
                continue
            if lease.labels.get(LABEL_DEPLOYMENT) != ours:
                return lease
        return None

    def release(self) -> None:
        """Let go (idempotent): closing the attach ends the container; removing it makes the
        owner free at once."""
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
