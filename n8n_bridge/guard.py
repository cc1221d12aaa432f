"""Each assistant route is n8n's: an n8n session (401 as n8n's auth layer answers) and the
route's global scope (403), then the handler as that user, its refusals in n8n's shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
from starlette.requests import Request
from starlette.responses import Response

from n8n_bridge.answers import BridgeHttpError, error, missing_scope, unauthorized
from n8n_bridge.n8n_user import INSTANCE_AI_SCOPE, N8nUser
from n8n_bridge.sessions import Sessions

__all__ = ["MANAGE_SCOPE", "Guard", "Handler"]

MANAGE_SCOPE = "instanceAi:manage"
Handler = Callable[[Request, N8nUser], Awaitable[Response]]


class Guard:
    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    def __call__(
        self, handler: Handler, scope: str = INSTANCE_AI_SCOPE
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                user = await self._sessions.user(request)
            except httpx.TransportError:
                return error(503, "n8n is not answering, so who is asking cannot be checked")
            if user is None:
                return unauthorized()
            if not user.may(scope):
                return missing_scope()
            try:
                return await handler(request, user)
            except BridgeHttpError as failed:
                return error(failed.status, failed.message)

        return endpoint
