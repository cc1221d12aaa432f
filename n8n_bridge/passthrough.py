"""Everything the bridge does not serve itself goes to n8n untouched: pages, assets, the REST
API, webhooks, and the push connection (a WebSocket, relayed frame by frame both ways).

Bodies stream in both directions (an upload or a download is never held whole), the
hop-by-hop headers stay on their hop, and the browser's own Host and Origin reach n8n, so
n8n's cookies, redirects and its push origin check see the address the person opened."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import websockets
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection

from n8n_bridge.answers import error

__all__ = ["N8nPassthrough"]

# RFC 9110 §7.6.1: meaningful for one connection only.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# What a WebSocket handshake's library sets itself.
_HANDSHAKE = frozenset(
    {
        "host",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "origin",
    }
)


class N8nPassthrough:
    def __init__(self, n8n_url: str, client: httpx.AsyncClient) -> None:
        self._n8n_url = n8n_url.rstrip("/")
        self._client = client

    async def http(self, request: Request) -> Response:
        headers = [(k, v) for k, v in request.headers.items() if k not in _HOP_BY_HOP]
        upstream = self._client.build_request(
            request.method,
            self._n8n_url + request.url.path,
            params=request.url.query,
            headers=headers,
            content=_body(request) if _has_body(request) else None,
        )
        try:
            answer = await self._client.send(upstream, stream=True, follow_redirects=False)
        except httpx.TransportError:
            return error(502, f"n8n at {self._n8n_url} is not answering; is it running?")
        kept = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in _HOP_BY_HOP]
        response = StreamingResponse(
            answer.aiter_raw(),
            status_code=answer.status_code,
            background=BackgroundTask(answer.aclose),
        )
        response.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in kept]
        return response

    async def fetch(self, request: Request) -> httpx.Response:
        """n8n's whole answer to a GET, decoded (for the few answers the bridge amends)."""
        headers = [
            (k, v)
            for k, v in request.headers.items()
            if k not in _HOP_BY_HOP and k not in ("accept-encoding", "content-length")
        ]
        try:
            return await self._client.get(
                self._n8n_url + request.url.path, params=request.url.query, headers=headers
            )
        except httpx.TransportError:
            return httpx.Response(502, json={"code": 502, "message": "n8n is not answering"})

    async def websocket(self, browser: WebSocket) -> None:
        target = "ws" + self._n8n_url.removeprefix("http") + browser.url.path
        if browser.url.query:
            target += "?" + browser.url.query
        headers = [(k, v) for k, v in browser.headers.items() if k not in _HANDSHAKE | _HOP_BY_HOP]
        origin = browser.headers.get("origin")
        try:
            n8n = await websockets.connect(
                target,
                # n8n checks the push connection's Origin against the host the browser
                # opened, which it reads from these behind a proxy.
                additional_headers=[
                    *headers,
                    ("x-forwarded-host", browser.headers.get("host", "")),
                    ("x-forwarded-proto", "https" if browser.url.scheme == "wss" else "http"),
                ],
                origin=origin,  # type: ignore[arg-type]
                open_timeout=30,
                max_size=None,
            )
        except (OSError, websockets.InvalidHandshake, TimeoutError):
            await browser.close(code=1011)
            return
        await browser.accept()
        async with n8n:
            await _relay(browser, n8n)


def _has_body(request: Request) -> bool:
    headers = request.headers
    return "transfer-encoding" in headers or headers.get("content-length", "0") != "0"


async def _body(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


async def _relay(browser: WebSocket, n8n: ClientConnection) -> None:
    """Frames both ways until either side closes; then the other is closed too."""

    async def upward() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await browser.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("text") is not None:
                    await n8n.send(message["text"])
                elif message.get("bytes") is not None:
                    await n8n.send(message["bytes"])

    async def downward() -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for frame in n8n:
                if isinstance(frame, str):
                    await browser.send_text(frame)
                else:
                    await browser.send_bytes(frame)

    tasks = [asyncio.create_task(upward()), asyncio.create_task(downward())]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        await browser.close()
