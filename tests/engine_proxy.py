"""A cuttable path to the real Docker engine, for fault injection.

The service under test is pointed at `DOCKER_HOST=unix://<proxy socket>`; every byte goes on
to the real engine's socket. `cut()` does what an engine going away does to its clients:
every connection (API calls, attached execs, worker streams) is closed and new ones are
refused, until `restore()`. The engine itself, and every other test's containers, are never
touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

ENGINE_SOCKET = "/var/run/docker.sock"


class EngineProxy:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    def start(self) -> None:
        self._thread.start()
        self.restore()

    def restore(self) -> None:
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    def cut(self) -> None:
        asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(10)

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _listen(self) -> None:
        if self._server is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            engine_r, engine_w = await asyncio.open_unix_connection(ENGINE_SOCKET)
        except OSError:
            client_w.close()
            return
        self._writers |= {client_w, engine_w}

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                if writer.can_write_eof() and not writer.is_closing():
                    writer.write_eof()  # a half-close (an exec's stdin) is passed on

        await asyncio.gather(pump(client_r, engine_w), pump(engine_r, client_w))
        for writer in (client_w, engine_w):
            writer.close()
            self._writers.discard(writer)


@contextlib.contextmanager
def engine_proxy(directory: Path) -> Iterator[EngineProxy]:
    proxy = EngineProxy(directory / "engine.sock")
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
