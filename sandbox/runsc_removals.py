"""Removing runsc sandboxes without waiting for the host's init.

A sandbox's host processes (its gofer, its sandbox and their stubs) are orphans once the
`runsc run --detach` that started them returns, so the host's PID 1 reaps them; `runsc delete`
waits until it has (it polls each pid every 100 ms), and an init that reaps in rounds (this
kind of machine's reaps every ~1.5 s) made each removal that long. A removal instead kills
every process in the sandbox's cgroup and waits only for the cgroup to empty (~10 ms), then
leaves the `runsc delete` (its state files) and the cgroups' removal to a background thread:
the container's id is never used again, so nothing waits on them. What a service that died
meanwhile left behind (state files no record names) goes when the next engine starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from sandbox.errors import SandboxUnavailableError
from sandbox.runsc_cli import delete, processes

__all__ = ["Removals", "kill_processes"]

log = structlog.get_logger(__name__)

# How long a killed sandbox's processes may take to leave its cgroup.
KILL_WAIT_S = 5.0
# Background deletions at once (each mostly waits for the init to reap).
DELETERS = 8


def kill_processes(container_id: str) -> bool:
    """SIGKILL every host process of the sandbox (all of them are in its cgroup) and wait
    until the cgroup holds none: a process leaves it as it dies, reaped or not. True once
    empty; False where this host's cgroups cannot tell (runsc then does it all)."""
    deadline = time.monotonic() + KILL_WAIT_S
    while pids := processes(container_id):
        if time.monotonic() >= deadline:
            return False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    return pids is not None


class Removals:
    """`runsc delete` of sandboxes whose processes were killed, in the background."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=DELETERS, thread_name_prefix="runsc-delete")

    def delete_later(self, state: Path, container_id: str) -> None:
        """In the background; here and now once closed (a sandbox that ends as its engine
        closes is removed after: its state must not stay for lack of a thread)."""
        try:
            self._pool.submit(self._delete, state, container_id)
        except RuntimeError:  # the pool is shut down
            self._delete(state, container_id)

    @staticmethod
    def _delete(state: Path, container_id: str) -> None:
        try:
            delete(state, container_id)
        except SandboxUnavailableError as exc:  # the next engine's sweep tries again
            log.warning("a removed sandbox's runsc state stayed", reason=str(exc))

    def close(self) -> None:
        """Wait for the deletions under way (each ~1.5 s at most)."""
        self._pool.shutdown(wait=True)
