"""The relay's one HTTP/WebSocket port.

| path | who | guard |
| --- | --- | --- |
| `/extension/<session>?token=bu_…` (WebSocket) | the browser extension | the relay token |
| `/cdp/<session>` (WebSocket) | Playwright `connect_over_cdp` | the CDP token header; loopback |
| `/browser/connect?token=bus_…` | the person: the public setup page | the setup token |
| `/browser/status?token=bus_…` | the setup page, every 2 s | the setup token |
| `/browser/connect-link?token=bus_…` | the setup page: mints the relay token | the setup token |
| `/healthz` | probes | none |

A refused WebSocket gets HTTP 403 before the upgrade, so nothing is attached; the setup
endpoints answer a bad, expired or unknown token with the same 404.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from http import HTTPStatus
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import structlog
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from browser_relay.sessions import BrowserSession, BrowserSessions, Expiring
from browser_relay.wire import MAX_MESSAGE_BYTES, PROTOCOL_VERSION

__all__ = [
    "CDP_TOKEN_HEADER",
    "PING_INTERVAL_SECONDS",
    "PING_TIMEOUT_SECONDS",
    "Endpoints",
    "RelayServer",
]

log = structlog.get_logger(__name__)

CDP_TOKEN_HEADER = "x-instance-ai-cdp-token"  # noqa: S105 (a header name, not a secret)
PING_INTERVAL_SECONDS = 5.0
PING_TIMEOUT_SECONDS = 15.0


@dataclass(frozen=True, kw_only=True)
class Endpoints:
    """Where a session is reached: what the backend hands to Playwright and to a person."""

    cdp_url: str
    cdp_headers: dict[str, str]
    setup_url: str
    setup_expires_at: float


class RelayServer:
    def __init__(
        self,
        sessions: BrowserSessions,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        public_url: str | None = None,
    ) -> None:
        self.sessions = sessions
        self._host = host
        self._port = port
        self._public_url = public_url
        self._server: Server | None = None

    async def start(self) -> RelayServer:
        self._server = await serve(
            self._connected,
            self._host,
            self._port,
            process_request=self._route,
            max_size=MAX_MESSAGE_BYTES,
            ping_interval=PING_INTERVAL_SECONDS,
            ping_timeout=PING_TIMEOUT_SECONDS,
        )
        return self

    async def close(self) -> None:
        await self.sessions.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(next(iter(self._server.sockets)).getsockname()[1])

    @property
    def http_url(self) -> str:
        return self._public_url or f"http://{self._host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return "ws" + self.http_url.removeprefix("http")

    def cdp_endpoint(self, session: BrowserSession) -> tuple[str, dict[str, str]]:
        """Where the automation client connects to a session: the URL and its token header."""
        return f"ws://127.0.0.1:{self.port}/cdp/{session.id}", {CDP_TOKEN_HEADER: session.cdp_token}

    def extension_url(
        self, session: BrowserSession, token: Expiring, *, local: bool = False
    ) -> str:
        """Where the extension (or, `local`, an in-process stand-in for it) connects."""
        base = f"ws://127.0.0.1:{self.port}" if local else self.ws_url
        return f"{base}/extension/{session.id}?{urlencode({'token': token.value})}"

    def endpoints(self, key: str) -> Endpoints:
        session = self.sessions.session(key)
        setup = self.sessions.setup_token(session)
        cdp_url, cdp_headers = self.cdp_endpoint(session)
        return Endpoints(
            cdp_url=cdp_url,
            cdp_headers=cdp_headers,
            setup_url=f"{self.http_url}/browser/connect?{urlencode({'token': setup.value})}",
            setup_expires_at=setup.expires_at,
        )

    # -- HTTP, and the guard in front of each WebSocket -----------------------------------

    def _route(self, connection: ServerConnection, request: Request) -> Response | None:
        url = urlsplit(request.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "extension":
            session = self.sessions.get(parts[1])
            token = query.get("token", "")
            if session is None or not self.sessions.extension_may_connect(session, token):
                return _forbidden("invalid or expired relay token")
            return _upgrade_only(request)
        if len(parts) == 2 and parts[0] == "cdp":
            session = self.sessions.get(parts[1])
            token = request.headers.get(CDP_TOKEN_HEADER, "")
            if (
                not _loopback(connection)
                or session is None
                or not self.sessions.client_may_connect(session, token)
            ):
                return _forbidden(
                    "the CDP endpoint takes loopback clients with the session's token"
                )
            return _upgrade_only(request)
        if url.path == "/healthz":
            return _json(HTTPStatus.OK, {"ok": True})
        if parts[0] == "browser" and len(parts) == 2:
            return self._setup(parts[1], query.get("token", ""))
        return _json(HTTPStatus.NOT_FOUND, {"error": "not found"})

    def _setup(self, page: str, token: str) -> Response:
        session = self.sessions.by_setup_token(token)
        if session is None or page not in ("connect", "status", "connect-link"):
            return _json(HTTPStatus.NOT_FOUND, {"error": "this link is not valid or has expired"})
        if page == "connect":
            html = resources.files("browser_relay").joinpath("static/connect.html").read_bytes()
            return _response(HTTPStatus.OK, "text/html; charset=utf-8", html)
        if page == "status":
            return _json(HTTPStatus.OK, _status(session))
        relay = self.sessions.mint_relay_token(session)
        return _json(
            HTTPStatus.OK,
            {
                "relayUrl": self.extension_url(session, relay),
                "expiresAt": relay.expires_at,
                "protocolVersion": PROTOCOL_VERSION,
            },
        )

    async def _connected(self, socket: ServerConnection) -> None:
        assert socket.request is not None
        kind, session_id = urlsplit(socket.request.path).path.strip("/").split("/")
        session = self.sessions.get(session_id)
        assert session is not None  # _route let it through
        log.info("browser relay connection", side=kind, session=session.id)
        if kind == "extension":
            await session.relay.serve_extension(socket)
        else:
            await session.relay.serve_client(socket)


def _status(session: BrowserSession) -> dict[str, Any]:
    return {
        "state": session.relay.state,
        "connected": session.relay.state == "connected",
        "connectedAt": session.connected_at,
    }


def _loopback(connection: ServerConnection) -> bool:
    try:
        return ipaddress.ip_address(connection.remote_address[0]).is_loopback
    except (ValueError, TypeError, IndexError):
        return False


def _upgrade_only(request: Request) -> Response | None:
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return _json(HTTPStatus.UPGRADE_REQUIRED, {"error": "this endpoint speaks WebSocket"})
    return None


def _forbidden(reason: str) -> Response:
    return _json(HTTPStatus.FORBIDDEN, {"error": reason})


def _json(status: HTTPStatus, body: dict[str, Any]) -> Response:
    return _response(status, "application/json", json.dumps(body).encode())


def _response(status: HTTPStatus, content_type: str, body: bytes) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Referrer-Policy", "no-referrer"),
        ]
    )
    return Response(status.value, status.phrase, headers, body)
