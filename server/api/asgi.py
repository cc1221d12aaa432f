"""Serving an ASGI app on a port of its own (the HTTP endpoint, the sandbox service API):
uvicorn inside the service's event loop, without its signal handling (the service stops
everything in order on its own signals)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp

__all__ = ["AsgiServer"]


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class AsgiServer:
    def __init__(self, what: str) -> None:
        self.what = what  # for messages: "HTTP", "the sandbox API"
        self.port = 0
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(
        self,
        app: ASGIApp,
        host: str,
        port: int,
        *,
        tls: tuple[Path, Path] | None = None,
        **config: Any,
    ) -> int:
        """Listen on host:port (0: any free port) and serve; the port it listens on."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: a response's head and body go out at once instead
        # of the body waiting ~40 ms for the client's delayed acknowledgement.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise OSError(f"cannot listen on {host}:{port} for {self.what}: {exc}") from exc
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        if tls is not None:
            config |= {"ssl_certfile": str(tls[0]), "ssl_keyfile": str(tls[1])}
        options: dict[str, Any] = {"log_level": "warning", "access_log": False} | config
        self._server = _Server(uvicorn.Config(app, **options))
        task = self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if task.done():
                task.result()
                raise OSError(f"{self.what} stopped while starting")
            await asyncio.sleep(0.01)
        return self.port

    async def close(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(Exception):
                await self._task
