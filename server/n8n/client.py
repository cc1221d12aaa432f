"""One n8n instance's public REST API (`/api/v1`), as JSON in and out, with n8n's answers
turned into the service's error kinds.

The key: the service's own, unless the current call carries the calling user's
(`acting_key`, set by the gRPC layer from `x-n8n-api-key` metadata), so the assistant acts
with exactly that user's rights. A key is only ever a request header: never logged, stored
or put in a result or an event, and error messages quote n8n's message, not the request.

Retries: only idempotent calls (GET, PUT, DELETE) are retried, on a failed connection or a
502/503/504, with backoff; a POST that may have landed is never sent twice.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlencode

import httpx
import structlog

from server.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from server.instance import InstanceUnavailableError

__all__ = ["API_PREFIX", "N8nClient", "acting_key"]

log = structlog.get_logger(__name__)

API_PREFIX = "/api/v1"
# The calling user's own n8n API key for the current call (None: the service's key).
acting_key: ContextVar[str | None] = ContextVar("n8n_acting_key", default=None)
_IDEMPOTENT = {"GET", "PUT", "DELETE"}
_RETRY_STATUS = {502, 503, 504}
_BACKOFF_S = (0.2, 0.6, 1.5)


class N8nClient:
    def __init__(self, base_url: str, service_key: str, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url
        self._service_key = service_key
        self._http = httpx.AsyncClient(
            base_url=base_url + API_PREFIX, timeout=timeout_s, follow_redirects=False
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def get(self, path: str, **params: Any) -> Any:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Any = None, **params: Any) -> Any:
        return await self.request("POST", path, json=body, params=params)

    async def put(self, path: str, body: Any = None, **params: Any) -> Any:
        return await self.request("PUT", path, json=body, params=params)

    async def patch(self, path: str, body: Any = None) -> Any:
        return await self.request("PATCH", path, json=body)

    async def delete(self, path: str, **params: Any) -> Any:
        return await self.request("DELETE", path, params=params)

    async def pages(
        self, path: str, *, limit: int | None = None, page_size: int = 100, **params: Any
    ) -> list[Any]:
        """Every item of a cursor-paged listing (up to `limit`)."""
        found: list[Any] = []
        cursor: str | None = None
        while True:
            paging = {"limit": page_size, **({"cursor": cursor} if cursor else {})}
            page = await self.get(path, **params, **paging)
            found += page.get("data") or []
            cursor = page.get("nextCursor")
            if not cursor or (limit is not None and len(found) >= limit):
                return found[:limit] if limit is not None else found

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        expected: tuple[int, ...] = (),
    ) -> Any:
        """`expected`: refusals that are an answer, not news (not logged)."""
        headers = {"X-N8N-API-KEY": acting_key.get() or self._service_key}
        query = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        if "?" in path:
            # A query already in the path is kept as written (a client's params would replace
            # it, and re-encode what the caller encoded on purpose).
            path, query = f"{path}&{urlencode(query)}" if query else path, {}
        attempts = len(_BACKOFF_S) + 1 if method in _IDEMPOTENT else 1
        for attempt in range(attempts):
            try:
                response = await self._http.request(
                    method, path, json=json, params=query or None, headers=headers
                )
            except httpx.TransportError as exc:
                if attempt + 1 < attempts:
                    await asyncio.sleep(_BACKOFF_S[attempt])
                    continue
                raise InstanceUnavailableError(
                    f"n8n at {self.base_url} could not be reached ({type(exc).__name__}); "
                    "check INSTANCE_AI_N8N_URL and that n8n is running"
                ) from None
            if response.status_code in _RETRY_STATUS and attempt + 1 < attempts:
                await asyncio.sleep(_BACKOFF_S[attempt])
                continue
            return _answer(method, path, response, expected)
        raise AssertionError("unreachable")  # pragma: no cover


def _param(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _answer(
    method: str, path: str, response: httpx.Response, expected: tuple[int, ...] = ()
) -> Any:
    status = response.status_code
    if status < 400:
        if status == 204 or not response.content:
            return None
        return response.json()
    message = _message(response)
    where = f"n8n {method} {path.split('?')[0]}"
    if status not in expected:
        log.info("n8n refused", method=method, path=path, status=status)
    if status == 401:
        raise PermissionDeniedError(
            f"{where}: the n8n API key was refused ({message}); check INSTANCE_AI_N8N_API_KEY "
            "or the key sent as x-n8n-api-key"
        )
    if status == 403:
        raise PermissionDeniedError(
            f"{where}: n8n does not allow this ({message}); the key lacks the scope, or the "
            "instance's licence lacks the feature"
        )
    if status == 404:
        raise NotFoundError(f"{where}: {message}")
    if status in (400, 422):
        raise InvalidArgumentError(f"{where}: {message}")
    if status == 409:
        raise FailedPreconditionError(f"{where}: {message}")
    raise InstanceUnavailableError(f"{where} answered {status}: {message}; retry later")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])[:500]
    return str(body)[:300]
