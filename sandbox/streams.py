"""A process in a sandbox with its stdin and stdout attached, as asyncio streams.

One attached process of the engine (stdin open): its socket carries stdin one way and stdout
and stderr the other, in the seam's frames (see engine.py). The socket is driven by the event
loop directly, so a long-lived, chatty process (a browser's CDP pipe) needs no thread.
stderr is kept as a short tail, for the error when the process dies.

The process starts only after a first newline on stdin: Docker's client may read past the
upgrade response's headers, and bytes it swallowed would break the framing, so nothing may be
written before the connection is ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque
from collections.abc import Mapping

import structlog

from sandbox.engine import STDERR, STDOUT, Attached, ContainerEngine
from sandbox.errors import SandboxUnavailableError

__all__ = ["STDERR_LINES", "ProcessStream"]

log = structlog.get_logger(__name__)

_HEADER = struct.Struct(">BxxxL")
STDERR_LINES = 40


class ProcessStream:
    def __init__(
        self, attached: Attached, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._attached = attached
        self._reader = reader
        self._writer = writer
        # What the process wrote to stdout, demultiplexed; EOF when it exits.
        self.stdout = asyncio.StreamReader(limit=2**26)
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._pump = asyncio.create_task(self._demultiplex(), name="sandbox-stream")

    @classmethod
    async def open(
        cls,
        engine: ContainerEngine,
        container_id: str,
        argv: list[str],
        *,
        workdir: str,
        environment: Mapping[str, str] | None = None,
    ) -> ProcessStream:
        attached = await asyncio.to_thread(
            engine.exec_attached,
            container_id,
            ["sh", "-c", 'read -r _ && exec "$@"', "sh", *argv],
            workdir=workdir,
            env=environment,
            stdin=True,
        )
        reader, writer = await asyncio.open_unix_connection(sock=attached.socket, limit=2**26)
        stream = cls(attached, reader, writer)
        await stream.write(b"\n")  # the go-ahead (see above)
        return stream

    async def write(self, data: bytes) -> None:
        if self._writer.is_closing():
            raise SandboxUnavailableError("the sandbox process has exited")
        self._writer.write(data)
        await self._writer.drain()

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    async def close(self) -> None:
        """Close stdin (EOF: a well-behaved process exits), give it a moment, then let go of
        the connection. The letting go happens even when this is cancelled."""
        try:
            if not self._writer.is_closing():
                with contextlib.suppress(OSError):
                    if self._writer.can_write_eof():
                        self._writer.write_eof()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._pump), 5)
        finally:
            self._writer.close()
            self._pump.cancel()
            self._attached.close()

    async def _demultiplex(self) -> None:
        partial = b""
        try:
            while True:
                stream, size = _HEADER.unpack(await self._reader.readexactly(_HEADER.size))
                data = await self._reader.readexactly(size)
                if stream == STDOUT:
                    self.stdout.feed_data(data)
                elif stream == STDERR:
                    *lines, partial = (partial + data).split(b"\n")
                    self._stderr.extend(line.decode(errors="replace") for line in lines)
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            self.stdout.feed_eof()
            self._writer.close()
