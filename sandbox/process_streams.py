"""A host subprocess's streams as the engine seam's `Attached` (engine.py): its stdin fed
from a socket, its stdout and stderr framed onto it (Docker's attach format), the stream
ending when the process does. Engines that run processes as host subprocesses share it: the
local engine's processes, and the OCI runtime's (`runsc exec`, `runsc run`) of the runsc
engine.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

from sandbox.engine import STDERR, STDOUT

__all__ = ["ProcessStreams", "exit_code_of"]

# After the main process exits, how long its output may still drain: the stream ends as soon as
# both pipes are read to their end, or after this (a child that keeps a pipe open does not hold
# the stream: it is killed with its job).
DRAIN_S = 0.2
_HEADER_LENGTH = 8


class ProcessStreams:
    """A subprocess's streams on a socket, framed as the seam says (see engine.py)."""

    def __init__(
        self,
        process: subprocess.Popen[bytes] | None = None,
        *,
        on_exit: Callable[[], None] = lambda: None,
        says_nothing: Callable[[int], bool] = lambda code: False,
    ):
        """Streams over a new socket pair: with a process, running at once, else once `run`
        is given one (an attach made before its container starts). `says_nothing(code)`:
        whether an exit code is the runtime's own (its sandbox went away), not the process's;
        `exit_code` then answers None (unknown)."""
        self._says_nothing = says_nothing
        self._exit_code: tuple[int | None] | None = None  # once known
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._process: subprocess.Popen[bytes] | None = None
        self._ours = ours
        self._theirs = theirs
        self._send = threading.Lock()
        self._closed = False
        if process is not None:
            self.run(process, on_exit=on_exit)

    def run(self, process: subprocess.Popen[bytes], *, on_exit: Callable[[], None]) -> None:
        """Connect the streams to `process` (once)."""
        self._process = process
        self._on_exit = on_exit
        if process.stdin is not None:
            threading.Thread(target=self._feed_stdin, daemon=True).start()
        forwarders = [
            threading.Thread(target=self._forward, args=(stream_id, pipe), daemon=True)
            for stream_id, pipe in ((STDOUT, process.stdout), (STDERR, process.stderr))
        ]
        for forwarder in forwarders:
            forwarder.start()
        threading.Thread(target=self._end_with_process, args=(forwarders,), daemon=True).start()

    @property
    def socket(self) -> socket.socket:
        return self._ours

    def frames(self) -> Iterator[tuple[int, bytes]]:
        reader = self._ours.makefile("rb")
        try:
            while header := reader.read(_HEADER_LENGTH):
                if len(header) < _HEADER_LENGTH:
                    return
                length = int.from_bytes(header[4:], "big")
                data = reader.read(length)
                if data:
                    yield header[0], data
        except OSError:
            return
        finally:
            reader.close()

    def exit_code(self) -> int | None:
        if self._process is None:
            return None
        if self._exit_code is None:
            code = self._process.poll()
            if code is None:
                return None
            self._exit_code = (None if self._says_nothing(code) else exit_code_of(code),)
        return self._exit_code[0]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sock in (self._ours, self._theirs):
            with contextlib.suppress(OSError):
                sock.close()

    def _feed_stdin(self) -> None:
        assert self._process is not None
        stdin = self._process.stdin
        assert stdin is not None
        try:
            while data := self._theirs.recv(65536):
                stdin.write(data)
                stdin.flush()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def _forward(self, stream_id: int, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        with pipe, contextlib.suppress(OSError, ValueError):
            while data := pipe.read1(65536):  # type: ignore[attr-defined]
                header = bytes([stream_id, 0, 0, 0]) + len(data).to_bytes(4, "big")
                with self._send:
                    self._theirs.sendall(header + data)

    def _end_with_process(self, forwarders: list[threading.Thread]) -> None:
        """The stream ends when the main process does, once its output is drained."""
        assert self._process is not None
        self._process.wait()
        self._on_exit()
        drained_by = time.monotonic() + DRAIN_S
        for forwarder in forwarders:
            forwarder.join(timeout=max(drained_by - time.monotonic(), 0))
        with contextlib.suppress(OSError), self._send:
            self._theirs.shutdown(socket.SHUT_WR)


def exit_code_of(code: int) -> int:
    """A process killed by a signal as a shell reports it (128 + the signal)."""
    return 128 - code if code < 0 else code
