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
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from sandbox import identity
from sandbox.errors import SandboxOwnerInUseError, SandboxUnavailableError
from sandbox.streams import close_hijacked

# How long a claim waits for the lease of a holder that just died to go away.
RELEASE_WAIT_S = 5.0
LABEL_HOLDER = identity.LABEL_PREFIX + "holder"


class OwnerLease:
    """`OwnerLease.acquire(client, image=..., owner=...)` or SandboxOwnerInUseError."""

    def __init__(self, container: Container, attached: Any) -> None:
        self._container = container
        self._attached = attached

    @property
    def holder(self) -> str:
        return str(self._container.labels.get(LABEL_HOLDER, ""))

    @classmethod
    def acquire(
        cls,
        client: docker.DockerClient,
        *,
        image: str,
        owner: str,
        holder: str = "",
        wait_s: float = RELEASE_WAIT_S,
    ) -> OwnerLease:
        holder = holder or f"pid {os.getpid()} on {socket.gethostname()}"
        deadline = time.monotonic() + wait_s
        while True:
            container = _create(client, image, owner, holder)
            if container is not None:
                break
            current = _current(client, owner)
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
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    current.remove(force=True)
        attached = None
        try:
            attached = client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
            container.start()
        except docker.errors.DockerException as exc:
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
            if attached is not None:
                close_hijacked(attached)
            raise SandboxUnavailableError(
                f"the Docker engine failed to start a lease: {exc}"
            ) from exc
        return cls(container, attached)

    def release(self) -> None:
        """Let go (idempotent): closing the attach ends the container; removing it makes the
        owner free at once."""
        close_hijacked(self._attached)
        with contextlib.suppress(docker.errors.DockerException):
            self._container.remove(force=True)


def _create(client: docker.DockerClient, image: str, owner: str, holder: str) -> Container | None:
    """The lease container, or None when the name is taken."""
    try:
        container: Container = client.containers.create(
            image,
            command=["cat"],
            name=identity.lease_name(owner),
            labels={identity.LABEL_LEASE: owner, LABEL_HOLDER: holder},
            stdin_open=True,
            auto_remove=True,
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            user="65534:65534",
            pids_limit=8,
            mem_limit=32 * 1024 * 1024,
        )
    except docker.errors.APIError as exc:
        if exc.status_code == 409:
            return None
        raise SandboxUnavailableError(f"the Docker engine failed to create a lease: {exc}") from exc
    return container


def _current(client: docker.DockerClient, owner: str) -> Container | None:
    try:
        container: Container = client.containers.get(identity.lease_name(owner))
    except docker.errors.NotFound:
        return None
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"the Docker engine did not answer: {exc}") from exc
    return container
