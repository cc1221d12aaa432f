"""The host's end of a worker that is its sandbox's main process (the runsc engine's): the
worker connects out to a socket in the sandbox's own control directory (worker.mjs
`--connect`), which the host makes only while it waits for that worker. Between two channels
the worker holds nothing of the host's, so a checkpoint of its sandbox restores anywhere.

The worker has one channel: whoever holds it keeps a lock file locked (released with the
channel, or by the kernel when its holder dies), so another process (a replica of the service
on this host) is told at once (WorkerHeldError) instead of waiting for a worker that will not
come.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sandbox.engine import STDOUT, ContainerGoneError, WorkerHeldError
from sandbox.errors import SandboxUnavailableError

__all__ = ["SocketChannel", "wait_for_worker"]

# How often a wait for the worker checks that its sandbox still runs.
POLL_S = 0.5


class SocketChannel:
    """A worker's connection as the seam's `Attached`: what it sends is its STDOUT."""

    def __init__(
        self, connection: socket.socket, on_close: Callable[[], None] = lambda: None
    ) -> None:
        self._socket = connection
        self._on_close = on_close
        self._closed = False

    @property
    def socket(self) -> socket.socket:
        return self._socket

    def frames(self) -> Iterator[tuple[int, bytes]]:
        with contextlib.suppress(OSError):
            while data := self._socket.recv(65536):
                yield STDOUT, data

    def exit_code(self) -> int | None:
        return None  # the worker outlives its channel

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._socket.close()
        if not self._closed:
            self._closed = True
            self._on_close()


def wait_for_worker(
    path: Path, lock: Path, timeout_s: float, running: Callable[[], bool], who: str = "worker"
) -> SocketChannel:
    """Hold `lock` (WorkerHeldError when another process does), then listen at `path` (made
    anew) until the sandbox's `who` (its worker, its job launcher) connects, then no more.
    ContainerGoneError when `running()` says its sandbox stopped meanwhile;
    SandboxUnavailableError when `timeout_s` ran out. The lock goes with the channel."""
    held = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(held)
        raise WorkerHeldError(f"the sandbox's {who} serves another process") from None
    try:
        connection = _accept(path, timeout_s, running, who)
    except BaseException:
        os.close(held)
        raise
    return SocketChannel(connection, on_close=lambda: os.close(held))


def _accept(path: Path, timeout_s: float, running: Callable[[], bool], who: str) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        path.chmod(0o666)
        listener.listen(1)
        listener.settimeout(POLL_S)
        while True:
            with contextlib.suppress(TimeoutError):
                connection, _ = listener.accept()
                break
            if not running():
                raise ContainerGoneError(f"the sandbox stopped before its {who} connected")
            if time.monotonic() >= deadline:
                raise SandboxUnavailableError(
                    f"the sandbox's {who} did not connect within {timeout_s:.0f} s"
                )
    finally:
        listener.close()
        path.unlink(missing_ok=True)
    connection.settimeout(None)
    return connection
