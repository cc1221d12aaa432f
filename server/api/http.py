"""The service's HTTP endpoint (`INSTANCE_AI_HTTP_PORT`): the service as an MCP server over
Streamable HTTP, and the WebSocket filesystem gateways connect out to.

| path | who | guard |
| --- | --- | --- |
| `/mcp` | MCP clients, `instance-ai mcp` | an API key as on gRPC (none set: loopback only) |
| `/gateway` (WebSocket) | `instance-ai gateway` | the user's gateway key |
| `/healthz` | probes | none |
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from fs_gateway.connect import GATEWAY_ENDED_CODE
from server.api.asgi import AsgiServer
from server.api.caller import caller_from
from server.api.interceptors import ApiKeys
from server.api.mcp_server import service_mcp_server
from server.errors import InstanceAIError
from server.mcp.gateway import Gateways
from server.mcp.gateway_keys import GatewayKeys
from server.tools.calls import ToolCalls

__all__ = ["HttpEndpoint"]

log = structlog.get_logger(__name__)

MCP_PATH = "/mcp"
GATEWAY_PATH = "/gateway"
MAX_GATEWAY_FRAME = 8 * 1024 * 1024


@dataclass(kw_only=True)
class HttpEndpoint:
    calls: ToolCalls
    gateways: Gateways
    gateway_keys: GatewayKeys
    api_keys: list[str]
    host: str
    port: int
    public_url: str | None = None

    def __post_init__(self) -> None:
        self._keys = ApiKeys(self.api_keys)
        self._manager = StreamableHTTPSessionManager(app=service_mcp_server(self.calls))
        self._server = AsgiServer("HTTP")

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (self.public_url or f"http://{host}:{self.port}").rstrip("/")

    async def start(self) -> HttpEndpoint:
        routes = Starlette(
            routes=[Route("/healthz", _healthz), WebSocketRoute(GATEWAY_PATH, self._gateway)],
            lifespan=self._lifespan,
        )

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            # /mcp exactly (and /mcp/): MCP clients POST there and need no redirect.
            if scope["type"] == "http" and scope["path"].rstrip("/") == MCP_PATH:
                await self._mcp(scope, receive, send)
            else:
                await routes(scope, receive, send)

        self.port = await self._server.start(
            app, self.host, self.port, ws_max_size=MAX_GATEWAY_FRAME, lifespan="on"
        )
        log.info("HTTP endpoint listening", url=self.url, mcp=self.url + MCP_PATH)
        return self

    async def close(self) -> None:
        self.gateways.close()
        await self._server.close()

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        # The session manager's task group lives exactly as long as the server.
        async with self._manager.run():
            yield

    # -- /mcp ---------------------------------------------------------------------------------

    async def _mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self._keys and not self._keys.accept(headers.get("authorization", "")):
            await _refuse(
                scope,
                receive,
                send,
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>' with a key from "
                "INSTANCE_AI_API_KEYS",
            )
            return
        try:
            caller_from(headers)
        except InstanceAIError as exc:
            await _refuse(scope, receive, send, 400, str(exc))
            return
        await self._manager.handle_request(scope, receive, send)

    # -- /gateway -----------------------------------------------------------------------------

    async def _gateway(self, websocket: WebSocket) -> None:
        header = websocket.headers.get("authorization", "")
        key = header[7:].strip() if header[:7].lower() == "bearer " else ""
        user_id = await self.gateway_keys.user_of(key) if key else None
        if user_id is None:
            # Refused before the upgrade: the gateway sees HTTP 403 and stops retrying.
            await websocket.close(code=1008)
            return
        await websocket.accept()

        async def receive() -> str:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            text = message.get("text")
            return text if text is not None else (message.get("bytes") or b"").decode()

        code, reason = 1000, ""
        try:
            ended_by_service = await self.gateways.serve(user_id, receive, websocket.send_text)
            if ended_by_service is not None:
                code, reason = GATEWAY_ENDED_CODE, ended_by_service
        except InstanceAIError as exc:
            log.warning("gateway refused", user=user_id, why=str(exc))
            code, reason = 1008, str(exc)[:120]
        except Exception as exc:
            log.warning("gateway connection ended", user=user_id, error=type(exc).__name__)
        finally:
            with contextlib.suppress(Exception):
                await websocket.close(code=code, reason=reason)


async def _healthz(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    response = JSONResponse({"error": message}, status_code=status)
    await response(scope, receive, send)
