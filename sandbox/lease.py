"""The owner lease: at most one live service manages the sandboxes of an owner on an engine.

Two services with the same owner would adopt each other's pool, kill each other's commands
and remove each other's sandboxes. The lease is one small container per owner, with a fixed
name (so creating it is the atomic claim), running `cat` on a stdin that the holding process
keeps attached. When that process ends, however it ends (SIGKILL included), the engine closes
the attach, `cat` sees end of file, and the container stops and removes itself: the lease is
held exactly as long as its holder lives, with no heartbeat to miss.
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
    ContainerGoneError,
    ContainerInfo,
    ContainerSpec,
    SandboxLimits,
)
from sandbox.errors import SandboxOwnerInUseError, SandboxUnavailableError

__all__ = ["LABEL_HOLDER", "OwnerLease"]

# How long a claim waits for the lease of a holder that just died to go away.
RELEASE_WAIT_S = 5.0
LABEL_HOLDER = identity.LABEL_PREFIX + "holder"
LABEL_CLAIM = identity.LABEL_PREFIX + "claim"
# `cat` needs next to nothing.
LEASE_LIMITS = SandboxLimits(
    user="65534:65534", pids_limit=8, memory_bytes=32 * 1024 * 1024, init=False, tmp_size=""
)


class OwnerLease:
    """`OwnerLease.acquire(engine, image=..., owner=...)` or SandboxOwnerInUseError."""

    def __init__(self, engine: ContainerEngine, container: ContainerInfo, attached: Attached):
        self._engine = engine
        self._container = container
        self._attached = attached

    @property
    def holder(self) -> str:
        return str(self._container.labels.get(LABEL_HOLDER, ""))

    @classmethod
    def acquire(
        cls,
        engine: ContainerEngine,
        *,
        image: str,
        owner: str,
        holder: str = "",
        wait_s: float = RELEASE_WAIT_S,
    ) -> OwnerLease:
        holder = holder or f"pid {os.getpid()} on {socket.gethostname()}"
        deadline = time.monotonic() + wait_s
        while True:
            container = _create(engine, image, owner, holder)
            if container is not None:
                break
            current = engine.inspect(identity.lease_name(owner))
            if current is not None and current.status == "running":
                if time.monotonic() >= deadline:
                    raise SandboxOwnerInUseError(
                        f"the sandbox owner {owner!r} is held by another running instance-ai "
                        f"service ({current.labels.get(LABEL_HOLDER, 'unknown')}); give this "
                        "one its own INSTANCE_AI_SANDBOX_OWNER (or leave it unset: each "
                        "database then gets its own), or stop the other"
                    )
                time.sleep(0.2)
            elif current is not None:  # stopped but not removed yet: a dead holder's
                with contextlib.suppress(SandboxUnavailableError):
                    engine.remove(current.id)
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


def _create(engine: ContainerEngine, image: str, owner: str, holder: str) -> ContainerInfo | None:
    """The lease container, or None when the name is taken."""
    name = identity.lease_name(owner)
    claim = uuid.uuid4().hex
    labels = {identity.LABEL_LEASE: owner, LABEL_HOLDER: holder, LABEL_CLAIM: claim}
    try:
        container = engine.create(
            ContainerSpec(
                name=name,
                image=image,
                labels=labels,
                limits=LEASE_LIMITS,
                command=["cat"],
                stdin_open=True,
                auto_remove=True,
            )
        )
    except ContainerGoneError:
        # The name was taken by a holder's container that went away while we looked at it
        # (it removes itself when its holder dies): the name is free again, try once more.
        return None
    # `create` answers the existing container when the name is taken: ours has our claim.
    return container if container.labels.get(LABEL_CLAIM) == claim else None
