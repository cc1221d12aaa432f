"""The user behind a request, with the one allowance n8n's editor forces: its event stream is
an EventSource, which cannot send the `browser-id` header n8n's `GET /rest/login` requires of
an editor session. So a user resolved from a request that carried it is remembered, in memory
only and for a few minutes, under a digest of the session cookie (never the cookie itself),
and the event stream is let in by that digest. The editor always makes such a request (the
thread list, the thread's creation) before it opens a stream."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict

from starlette.requests import HTTPConnection

from n8n_bridge.n8n_user import N8nUser, N8nUsers

__all__ = ["REMEMBER_S", "Sessions"]

REMEMBER_S = 600.0
_REMEMBERED_MAX = 10_000
_COOKIE = "n8n-auth"


class Sessions:
    def __init__(self, users: N8nUsers) -> None:
        self._users = users
        self._seen: OrderedDict[str, tuple[float, N8nUser]] = OrderedDict()

    async def user(self, request: HTTPConnection) -> N8nUser | None:
        """Asks n8n; when n8n refuses a request without a browser id, the user this session
        was last seen as."""
        user = await self._users.of(request)
        key = _digest(request)
        if key is None:
            return user
        if user is not None:
            self._remember(key, user)
            return user
        if "browser-id" in request.headers:
            return None  # n8n saw everything it asks for, and said no
        seen = self._seen.get(key)
        if seen is None or time.monotonic() - seen[0] > REMEMBER_S:
            return None
        return seen[1]

    def _remember(self, key: str, user: N8nUser) -> None:
        self._seen[key] = (time.monotonic(), user)
        self._seen.move_to_end(key)
        while len(self._seen) > _REMEMBERED_MAX:
            self._seen.popitem(last=False)


def _digest(request: HTTPConnection) -> str | None:
    token = request.cookies.get(_COOKIE)
    return hashlib.sha256(token.encode()).hexdigest() if token else None
