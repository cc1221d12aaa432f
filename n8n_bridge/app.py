"""The bridge: one HTTP listener in front of a user's n8n. `/rest/instance-ai/*` is served from
the service; two of n8n's own answers are amended so its editor opens the assistant with the
service behind it (`editor_settings.py`); everything else passes to n8n untouched."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route, WebSocketRoute

from instance_ai_client.connection import ClientConfig
from n8n_bridge.editor_settings import EDITOR_SETTINGS_PATHS, amended
from n8n_bridge.event_stream import KEEP_ALIVE_S, EventStream
from n8n_bridge.guard import Guard
from n8n_bridge.n8n_user import N8nUsers
from n8n_bridge.passthrough import N8nPassthrough
from n8n_bridge.routes import Routes, unavailable
from n8n_bridge.service import Service
from n8n_bridge.sessions import Sessions

__all__ = ["BridgeConfig", "bridge_app"]

PREFIX = "/rest/instance-ai"


@dataclass(frozen=True, kw_only=True)
class BridgeConfig:
    n8n_url: str
    client: ClientConfig
    # n8n user id or e-mail → that user's n8n API key (what they build lands with their
    # rights); users not listed act through the service's own key.
    user_keys: Mapping[str, str] = field(default_factory=dict)
    # Shown by the editor as the assistant's model.
    model_name: str = "instance-ai"
    keep_alive_s: float = KEEP_ALIVE_S


def bridge_app(config: BridgeConfig) -> Starlette:
    n8n = httpx.AsyncClient(base_url=config.n8n_url, timeout=httpx.Timeout(30, read=None))
    service = Service(config.client, config.user_keys)
    sessions = Sessions(N8nUsers(n8n))
    passthrough = N8nPassthrough(config.n8n_url, n8n)
    routes = Routes(service, sessions, model_name=config.model_name)
    events = EventStream(service, config.keep_alive_s)

    async def editor_settings(request: Request) -> Response:
        return amended(await passthrough.fetch(request), request.url.path)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        service.open()
        try:
            yield
        finally:
            await service.close()
            await n8n.aclose()

    assistant = [
        Route("/events/{thread_id}", Guard(sessions)(events.handle), methods=["GET"]),
        *routes.table(),
        Route("/{rest:path}", unavailable, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
    return Starlette(
        routes=[
            Mount(PREFIX, routes=assistant),
            *(Route(path, editor_settings, methods=["GET"]) for path in EDITOR_SETTINGS_PATHS),
            WebSocketRoute("/{rest:path}", passthrough.websocket),
            Route(
                "/{rest:path}",
                passthrough.http,
                methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
            ),
        ],
        lifespan=lifespan,
    )
