"""The sandbox's only way out: an HTTP proxy on a Unix socket mounted into one container.

Sandboxes have no network. Each container gets a host directory of its own mounted at
`/run/instance-ai`; the host listens on `proxy.sock` there for the thread the container
belongs to, so the thread is known from the socket a request arrives on, never from anything
the sandbox says. Inside, a bridge started at initialisation (`bin/egress-bridge.mjs`) offers
the socket as `127.0.0.1:3128`, which `HTTP_PROXY` / `HTTPS_PROXY` point at.

Both proxy forms are served: `CONNECT host:port` (a tunnel, for https) and absolute-form
requests (`GET http://host/path`, for http). Every request is put to `policy(thread, host,
port)`, which returns the address to connect to (the caller's SSRF rules and approvals) or
raises `EgressDenied` with the reason, answered as 403. Each request is logged by thread,
method, host and port; headers and bodies (which carry credentials) never are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import structlog

from sandbox.errors import SandboxError

__all__ = [
    "BRIDGE_PORT",
    "CONNECT_TIMEOUT_S",
    "MAX_HEAD_BYTES",
    "MOUNT_POINT",
    "SOCKET_NAME",
    "EgressDenied",
    "EgressProxy",
    "Policy",
]

log = structlog.get_logger(__name__)

SOCKET_NAME = "proxy.sock"
MOUNT_POINT = "/run/instance-ai"
BRIDGE_PORT = 3128
MAX_HEAD_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 15.0


class EgressDenied(SandboxError):
    """A request the policy refuses; the message is sent back to the sandbox."""


Policy = Callable[[str, str, int], Awaitable[str]]


class EgressProxy:
    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._servers: dict[str, tuple[Path, asyncio.AbstractServer]] = {}

    async def listen(self, thread_id: str, directory: Path) -> None:
        """Serve `directory/proxy.sock` for `thread_id` (replacing an earlier listener)."""
        current = self._servers.get(thread_id)
        if current is not None and current[0] == directory:
            return
        await self.stop(thread_id)
        path = directory / SOCKET_NAME
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(thread_id, reader, writer)

        server = await asyncio.start_unix_server(serve, path=str(path))
        # The sandbox user (another uid) connects; the directory is this container's alone.
        os.chmod(path, 0o666)  # noqa: S103
        self._servers[thread_id] = (directory, server)

    async def stop(self, thread_id: str) -> None:
        found = self._servers.pop(thread_id, None)
        if found is not None:
            found[1].close()
            with contextlib.suppress(Exception):
                await found[1].wait_closed()

    async def close(self) -> None:
        for thread_id in list(self._servers):
            await self.stop(thread_id)

    async def _serve(
        self, thread_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        try:
            method, target, rest = _parse(head)
            host, port = _destination(method, target)
            address = await self._policy(thread_id, host, port)
        except EgressDenied as denied:
            log.info("egress refused", thread=thread_id, reason=str(denied))
            await _answer(writer, 403, str(denied))
            return
        log.info("egress", thread=thread_id, method=method, host=host, port=port)
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(address, port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            await _answer(writer, 502, f"{host}:{port} could not be reached ({type(exc).__name__})")
            return
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        else:
            upstream_writer.write(_origin_form(method, target, rest))
        await writer.drain()
        await asyncio.gather(
            _pipe(reader, upstream_writer), _pipe(upstream_reader, writer), return_exceptions=True
        )


def _parse(head: bytes) -> tuple[str, str, list[bytes]]:
    lines = head.split(b"\r\n")
    parts = lines[0].decode("latin-1").split(" ")
    if len(parts) != 3:
        raise EgressDenied("not an HTTP proxy request")
    return parts[0].upper(), parts[1], lines[1:]


def _destination(method: str, target: str) -> tuple[str, int]:
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise EgressDenied("CONNECT needs host:port")
        return host.strip("[]"), int(port)
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise EgressDenied("only absolute http:// URLs (or CONNECT for https) go through")
    return parts.hostname, parts.port or 80


def _origin_form(method: str, target: str, rest: list[bytes]) -> bytes:
    """The request as the origin expects it: path only, no proxy headers."""
    parts = urlsplit(target)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = [line for line in rest if not line.lower().startswith(b"proxy-")]
    return f"{method} {path} HTTP/1.1\r\n".encode("latin-1") + b"\r\n".join(kept)


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = reason.encode()
    words = {403: "Forbidden", 502: "Bad Gateway"}[status]
    writer.write(
        f"HTTP/1.1 {status} {words}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(64 * 1024):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()
