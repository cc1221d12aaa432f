"""Who is asking, as n8n knows them: the request's n8n session (its cookie and browser id)
shown to n8n's own `GET /rest/login`, then the user's projects. Nothing of the session is
kept, logged or sent anywhere but to that n8n: each request asks again."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from starlette.requests import HTTPConnection

__all__ = ["INSTANCE_AI_SCOPE", "N8nUser", "N8nUsers"]

# The global scope n8n requires for every conversation route (members and owners have it).
INSTANCE_AI_SCOPE = "instanceAi:message"
# What n8n's auth layer reads from a request: the session cookie, and the browser id its
# session is bound to (sent as a header by the editor's fetch calls).
_SESSION_HEADERS = ("cookie", "browser-id")


@dataclass(frozen=True, kw_only=True)
class N8nUser:
    id: str
    email: str
    scopes: frozenset[str]
    personal_project_id: str
    project_ids: frozenset[str]

    def may(self, scope: str) -> bool:
        return scope in self.scopes


class N8nUsers:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def of(self, request: HTTPConnection) -> N8nUser | None:
        """The user of the request's n8n session; None when n8n does not know it."""
        headers = {k: v for k in _SESSION_HEADERS if (v := request.headers.get(k))}
        if "cookie" not in headers:
            return None
        login = await self._client.get("/rest/login", headers=headers)
        if login.status_code != 200:
            return None
        user = login.json()["data"]
        projects = await self._client.get("/rest/projects/my-projects", headers=headers)
        listed = projects.json()["data"] if projects.status_code == 200 else []
        personal = next((p["id"] for p in listed if p.get("type") == "personal"), None)
        if personal is None:
            found = await self._client.get("/rest/projects/personal", headers=headers)
            personal = found.json()["data"]["id"]
        return N8nUser(
            id=str(user["id"]),
            email=str(user.get("email") or ""),
            scopes=frozenset(user.get("globalScopes") or ()),
            personal_project_id=str(personal),
            project_ids=frozenset({str(personal), *(str(p["id"]) for p in listed)}),
        )
