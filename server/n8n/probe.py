"""Whether the n8n instance answers, watched in the background for the health service (a
load balancer or the n8n backend sees the instance's state without calling a tool), and what
else to find out from it while it does (its licence)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import httpx
import structlog

__all__ = ["InstanceProbe"]

log = structlog.get_logger(__name__)

Listener = Callable[[bool], Awaitable[None]]
Refresh = Callable[[], Awaitable[None]]


class InstanceProbe:
    def __init__(
        self,
        base_url: str,
        *,
        interval_s: float = 10.0,
        timeout_s: float = 5.0,
        refresh: Refresh | None = None,
    ) -> None:
        """`refresh`: what else to find out from the instance each time it answers (its
        licence)."""
        self.base_url = base_url
        self.interval_s = interval_s
        self.up = False
        self._http = httpx.AsyncClient(timeout=timeout_s)
        self._listeners: list[Listener] = []
        self._refresh = refresh
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._check()
        self._task = asyncio.create_task(self._watch(), name="n8n-probe")

    def on_change(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._http.aclose()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._check()

    async def _check(self) -> None:
        try:
            response = await self._http.get(f"{self.base_url}/healthz/readiness")
            up = response.status_code == 200
        except httpx.HTTPError:
            up = False
        if up != self.up:
            self.up = up
            log.info("n8n instance", url=self.base_url, up=up)
            for listener in self._listeners:
                await listener(up)
        if up and self._refresh is not None:
            try:
                await self._refresh()
            except Exception:  # the watch must go on: health depends on it
                log.exception("n8n refresh failed", url=self.base_url)
