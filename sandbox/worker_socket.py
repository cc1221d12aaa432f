"""The host's end of a worker that is its sandbox's main process (the runsc engine's): the
worker connects out to a socket in the sandbox's own control directory (worker.mjs
`--connect`), which the host makes only while it waits for that worker. Between two channels
the worker holds nothing of the host's, so a checkpoint of its sandbox restores anywhere.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sandbox.engine import STDOUT, ContainerGoneError
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
    path: Path,
    timeout_s: float,
    running: Callable[[], bool],
    on_close: Callable[[], None] = lambda: None,
) -> SocketChannel:
    """Listen at `path` (made anew, for the sandbox user) until the worker connects, then no
    more. ContainerGoneError when `running()` says its sandbox stopped meanwhile;
    SandboxUnavailableError when `timeout_s` ran out. `on_close` runs once the channel is
    closed."""
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
                raise ContainerGoneError("the sandbox stopped before its worker connected")
            if time.monotonic() >= deadline:
                raise SandboxUnavailableError(
                    f"the sandbox's worker did not connect within {timeout_s:.0f} s"
                )
    finally:
        listener.close()
        path.unlink(missing_ok=True)
    connection.settimeout(None)
    return SocketChannel(connection, on_close)
