"""The gateway's connection out to the service: a WebSocket to `<server>/gateway` with the
person's gateway key, a hello saying what it offers (n8n's gateway capabilities: root,
host, tool categories), then MCP with the service as the client. A dropped connection is
retried with backoff; a refused key ends the gateway (retrying cannot fix it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from urllib.parse import urlsplit, urlunsplit

import anyio
import structlog
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from fs_gateway.files import FileRoot
from fs_gateway.link import message_streams
from fs_gateway.server import gateway_server

__all__ = [
    "GATEWAY_ENDED_CODE",
    "GATEWAY_PATH",
    "GatewayRefused",
    "gateway_url",
    "hello",
    "run_gateway",
]

log = structlog.get_logger(__name__)

GATEWAY_PATH = "/gateway"
MAX_FRAME_BYTES = 8 * 1024 * 1024
# The close code of a connection the service ended on purpose (a newer gateway of the same
# user, a new key): the gateway stops rather than take the place back.
GATEWAY_ENDED_CODE = 4001


class GatewayRefused(Exception):
    """The service refused the key (or the path): retrying would not help."""


def gateway_url(server: str) -> str:
    """`host:port`, `http(s)://host:port[/…]` or `ws(s)://…` → the WebSocket URL."""
    if "://" not in server:
        server = f"http://{server}"
    parts = urlsplit(server)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss") or not parts.netloc:
        raise ValueError(f"--server {server!r}: give host:port or the service's http(s) URL")
    path = parts.path.rstrip("/")
    path = path if path.endswith(GATEWAY_PATH) else path + GATEWAY_PATH
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def hello(files: FileRoot) -> dict[str, object]:
    return {
        "rootPath": str(files.root),
        "hostIdentifier": socket.gethostname(),
        "toolCategories": [{"name": "filesystem", "enabled": True, "writeAccess": files.write}],
    }


async def run_gateway(server: str, key: str, files: FileRoot, *, retry_max_s: float = 30.0) -> None:
    """Serve until cancelled; raises GatewayRefused when the service refuses the key."""
    url = gateway_url(server)
    delay = 0.5
    while True:
        try:
            await _serve_once(url, key, files)
            delay = 0.5
            log.warning("gateway disconnected; reconnecting", url=url)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403, 404):
                raise GatewayRefused(
                    f"the service refused this gateway (HTTP {status}): check --server and "
                    "the key (a new key replaces the previous one)"
                ) from None
            log.warning("gateway cannot connect", url=url, status=status)
        except (TimeoutError, OSError, ConnectionClosed) as exc:
            log.warning("gateway cannot connect", url=url, error=str(exc) or type(exc).__name__)
        await asyncio.sleep(delay)
        delay = min(delay * 2, retry_max_s)


async def _serve_once(url: str, key: str, files: FileRoot) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    async with connect(url, additional_headers=headers, max_size=MAX_FRAME_BYTES) as socket_:
        await socket_.send(json.dumps(hello(files)))
        log.info("gateway connected", url=url, root=str(files.root), write=files.write)
        server = gateway_server(files)
        ended = anyio.Event()

        async def receive() -> str:
            message = await socket_.recv()
            return message if isinstance(message, str) else message.decode()

        async with message_streams(receive, socket_.send, ended) as (read, write):
            with contextlib.suppress(Exception):
                await server.run(read, write, server.create_initialization_options())
    if socket_.close_code == GATEWAY_ENDED_CODE:
        raise GatewayRefused(f"the service ended this gateway: {socket_.close_reason}")
