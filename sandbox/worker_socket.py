"""The host's end of a worker that is its sandbox's main process (the runsc engine's): the
worker connects out to a socket in the sandbox's own control directory (worker.mjs
`--connect`), which the host makes only while it waits for that worker. Between two channels
the worker holds nothing of the host's, so a checkpoint of its sandbox restores anywhere.

The worker has one channel: whoever holds it keeps a lock file locked (released with the
channel, or by the kernel when its holder dies), so another process (a replica of the service
on this host) is told at once (WorkerHeldError) instead of waiting for a worker that will not
come.

A channel let go is not cut: the host shuts its end for writing and waits for the sandbox's
process to close its own (`wait_closed`). gVisor cannot save a socket still connected to the
host, and a checkpoint that meets one fails and takes its sandbox down with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sandbox.engine import STDOUT, ContainerGoneError, WorkerHeldError, gone_if_missing
from sandbox.errors import SandboxUnavailableError

__all__ = ["SocketChannel", "wait_closed", "wait_for_worker"]

# How often a wait for the worker checks that its sandbox still runs.
POLL_S = 0.5
# How long a channel let go waits for the sandbox's process to close its end (it does so as
# it reads the end of the stream: in a few milliseconds).
CLOSE_WAIT_S = 2.0

# Channels let go whose far end may still be open, by their lock file.
_closing: dict[Path, set[SocketChannel]] = {}
_closing_lock = threading.Lock()


class SocketChannel:
    """A worker's connection as the seam's `Attached`: what it sends is its STDOUT."""

    def __init__(
        self,
        connection: socket.socket,
        on_close: Callable[[], None] = lambda: None,
        lock: Path | None = None,
    ) -> None:
        self._socket = connection
        self._on_close = on_close
        self._lock = lock
        self._closed = False
        self._finished = threading.Event()  # let go, and the socket closed
        self._far_end_closed = False

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
        """Let go: the lock at once; the socket once the far end closed (see the module's
        docstring), in a thread of its own."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_WR)
        if self._lock is not None:
            with _closing_lock:
                _closing.setdefault(self._lock, set()).add(self)
        threading.Thread(target=self._finish, name="sandbox-channel-close", daemon=True).start()
        self._on_close()

    def _finish(self) -> None:
        """Read (and drop) what is left until the far end closes, then close ours."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        with contextlib.suppress(OSError, ValueError):
            while (left := deadline - time.monotonic()) > 0:
                readable, _, _ = select.select([self._socket], [], [], left)
                if readable and not self._socket.recv(65536):
                    self._far_end_closed = True
                    break
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes a reader still waiting
        with contextlib.suppress(OSError):
            self._socket.close()
        self._finished.set()
        if self._lock is not None:
            with _closing_lock:
                waiting = _closing.get(self._lock, set())
                waiting.discard(self)
                if not waiting:
                    _closing.pop(self._lock, None)


def wait_closed(lock: Path) -> bool:
    """Wait until every channel of this process with the lock file `lock` that was let go
    is closed; False when the far end of one did not close in time."""
    with _closing_lock:
        waiting = list(_closing.get(lock, ()))
    for channel in waiting:
        channel._finished.wait()  # CLOSE_WAIT_S at most
    return all(channel._far_end_closed for channel in waiting)


def wait_for_worker(
    path: Path, lock: Path, timeout_s: float, running: Callable[[], bool], who: str = "worker"
) -> SocketChannel:
    """Hold `lock` (WorkerHeldError when another process does), then listen at `path` (made
    anew) until the sandbox's `who` (its worker, its job launcher) connects, then no more.
    ContainerGoneError when `running()` says its sandbox stopped meanwhile, or its directory
    (which holds both) is gone: the sandbox was removed; SandboxUnavailableError when
    `timeout_s` ran out. The lock goes with the channel."""
    with gone_if_missing(_removed_before(who)):
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
    return SocketChannel(connection, on_close=lambda: os.close(held), lock=lock)


def _removed_before(who: str) -> str:
    return f"the sandbox was removed before its {who} connected"


def _accept(path: Path, timeout_s: float, running: Callable[[], bool], who: str) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with gone_if_missing(_removed_before(who)):
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
