"""Playwright on one connected browser: the operations behind the browser tools.

A `BrowserDriver` holds a Playwright connection (`connect_over_cdp`, through the relay) and
what the tools need between calls: a stable id per page, which page is active, each page's
console messages and network requests, and dialogs or file choosers waiting for an answer
(they are kept open, not auto-dismissed, so the agent can see and answer them).

Elements are addressed by a `ref` from the last snapshot (Playwright's AI snapshot refs) or by
a CSS/Playwright `selector`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import itertools
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from playwright.async_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Dialog,
    FileChooser,
    FilePayload,
    Locator,
    Page,
    Playwright,
    Request,
)
from playwright.async_api import Error as PlaywrightError

from browser_relay.errors import DriverError
from browser_relay.target import Target

__all__ = ["LOG_LIMIT", "BrowserDriver", "Drivers", "PageState", "WaitUntil"]

T = TypeVar("T")
LOG_LIMIT = 500
WaitUntil = Literal["load", "domcontentloaded", "networkidle", "commit"]


@dataclass(eq=False)
class PageState:
    id: str
    page: Page
    console: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=LOG_LIMIT))
    network: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=LOG_LIMIT))
    dialog: Dialog | None = None
    chooser: FileChooser | None = None
    # Set when a dialog opens: an action that opened one is not waited for further.
    modal: asyncio.Event = field(default_factory=asyncio.Event)
    # Actions still blocked behind an open dialog (they end when it is answered).
    blocked: set[asyncio.Future[Any]] = field(default_factory=set)


class BrowserDriver:
    def __init__(self, playwright: Playwright, cdp_url: str, headers: dict[str, str]) -> None:
        self._playwright = playwright
        self._cdp_url = cdp_url
        self._headers = headers
        self._browser: Browser | None = None
        self._pages: dict[str, PageState] = {}
        self._ids = itertools.count(1)
        self.active: str | None = None
        self.new_tabs: list[str] = []

    @property
    def connected(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    async def connect(self) -> None:
        self._browser = await self._playwright.chromium.connect_over_cdp(
            self._cdp_url, headers=self._headers
        )
        context = self._context()
        context.on("page", self._adopt)
        for page in context.pages:
            self._adopt(page)

    async def close(self) -> None:
        if self._browser is not None:
            await self._browser.close()
            self._browser = None

    def _context(self) -> BrowserContext:
        if self._browser is None or not self._browser.contexts:
            raise DriverError("no browser is connected")
        return self._browser.contexts[0]

    def _adopt(self, page: Page) -> None:
        state = PageState(id=f"p{next(self._ids)}", page=page)
        self._pages[state.id] = state
        if self.active is not None:
            self.new_tabs.append(state.id)
        self.active = self.active or state.id
        page.on("console", lambda message: state.console.append(_console(message)))
        page.on("request", lambda request: state.network.append(_request(request)))
        page.on("dialog", lambda dialog: self._dialog_opened(state, dialog))
        page.on("filechooser", lambda chooser: setattr(state, "chooser", chooser))
        page.on("close", lambda _page: self._forget(state.id))

    @staticmethod
    def _dialog_opened(state: PageState, dialog: Dialog) -> None:
        state.dialog = dialog
        state.modal.set()

    async def perform(self, page_id: str | None, action: Awaitable[T]) -> T | None:
        """Run an action on a tab; when it opens a dialog, return at once (None) instead of
        waiting: the page is blocked until browser_dialog answers, and so is the action."""
        state = self.state(page_id)
        state.modal.clear()
        task = asyncio.ensure_future(action)
        opened = asyncio.ensure_future(state.modal.wait())
        await asyncio.wait({task, opened}, return_when=asyncio.FIRST_COMPLETED)
        opened.cancel()
        if task.done():
            return task.result()
        state.blocked.add(task)
        task.add_done_callback(_settled(state.blocked))
        return None

    def _forget(self, page_id: str) -> None:
        self._pages.pop(page_id, None)
        if self.active == page_id:
            self.active = next(iter(self._pages), None)

    def state(self, page_id: str | None = None) -> PageState:
        wanted = page_id or self.active
        if wanted is None or wanted not in self._pages:
            known = ", ".join(self._pages) or "none"
            raise DriverError(f"no tab {wanted!r}; open tabs: {known} (browser_tab_list)")
        return self._pages[wanted]

    def page(self, page_id: str | None = None) -> Page:
        return self.state(page_id).page

    def locate(self, target: Target, page_id: str | None = None) -> Locator:
        page = self.page(page_id)
        if target.ref:
            return page.get_by_ref(target.ref)
        if target.selector:
            return page.locator(target.selector).first
        raise DriverError("give the element as ref (from browser_snapshot) or selector")

    # -- tabs ----------------------------------------------------------------------------

    async def open_tab(self, url: str | None) -> dict[str, Any]:
        page = await self._context().new_page()
        state = next(s for s in self._pages.values() if s.page is page)
        if state.id in self.new_tabs:
            self.new_tabs.remove(state.id)
        self.active = state.id
        if url:
            await page.goto(url)
        return await self.tab_info(state)

    async def tabs(self) -> list[dict[str, Any]]:
        return [await self.tab_info(state) for state in self._pages.values()]

    async def tab_info(self, state: PageState) -> dict[str, Any]:
        try:
            title = await state.page.title()
        except PlaywrightError:
            title = ""
        return {
            "id": state.id,
            "title": title,
            "url": state.page.url,
            "active": state.id == self.active,
        }

    async def focus(self, page_id: str) -> dict[str, Any]:
        state = self.state(page_id)
        await state.page.bring_to_front()
        self.active = state.id
        return await self.tab_info(state)

    async def close_tab(self, page_id: str) -> None:
        state = self.state(page_id)
        await state.page.close()
        self._forget(state.id)

    # -- reading -------------------------------------------------------------------------

    async def snapshot(self, page_id: str | None, scope: Target | None) -> str:
        if scope is not None:
            return await self.locate(scope, page_id).aria_snapshot(mode="ai")
        return await self.page(page_id).aria_snapshot(mode="ai")

    async def screenshot(self, page_id: str | None, element: Target | None, full: bool) -> str:
        if element is not None:
            data = await self.locate(element, page_id).screenshot()
        else:
            data = await self.page(page_id).screenshot(full_page=full)
        return base64.b64encode(data).decode()

    async def html(self, page_id: str | None, selector: str | None) -> str:
        """The page's HTML, or one element's inner HTML."""
        page = self.page(page_id)
        return await (page.locator(selector).first.inner_html() if selector else page.content())

    async def pdf(self, page_id: str | None, paper: str, landscape: bool) -> str:
        data = await self.page(page_id).pdf(format=paper, landscape=landscape)
        return base64.b64encode(data).decode()

    def console(self, page_id: str | None, level: str | None, clear: bool) -> list[dict[str, Any]]:
        state = self.state(page_id)
        found = [m for m in state.console if level is None or m["level"] == level]
        if clear:
            state.console.clear()
        return found

    def network(
        self, page_id: str | None, pattern: str | None, clear: bool
    ) -> list[dict[str, Any]]:
        state = self.state(page_id)
        found = [r for r in state.network if pattern is None or fnmatch.fnmatch(r["url"], pattern)]
        if clear:
            state.network.clear()
        return found

    def modal_states(self, page_id: str | None = None) -> list[dict[str, Any]]:
        state = self.state(page_id)
        found = []
        if state.dialog is not None:
            found.append(
                {
                    "type": "dialog",
                    "dialogType": state.dialog.type,
                    "message": state.dialog.message,
                    "clearedBy": "browser_dialog",
                }
            )
        if state.chooser is not None:
            found.append(
                {
                    "type": "filechooser",
                    "description": "a file chooser is open",
                    "clearedBy": "browser_upload",
                }
            )
        return found

    # -- answering what the page asks ----------------------------------------------------

    async def answer_dialog(
        self, page_id: str | None, accept: bool, text: str | None
    ) -> dict[str, Any]:
        state = self.state(page_id)
        dialog = state.dialog
        if dialog is None:
            raise DriverError("no dialog is open on this tab")
        state.dialog = None
        if accept:
            await dialog.accept(text or "")
        else:
            await dialog.dismiss()
        return {"type": dialog.type, "message": dialog.message}

    async def upload(
        self, page_id: str | None, element: Target | None, files: list[FilePayload]
    ) -> None:
        state = self.state(page_id)
        if element is not None:
            await self.locate(element, page_id).set_input_files(files)
        elif state.chooser is not None:
            await state.chooser.set_files(files)
        else:
            raise DriverError("no file chooser is open: give the file input as element")
        state.chooser = None


def _settled(blocked: set[asyncio.Future[Any]]) -> Any:
    def forget(task: asyncio.Future[Any]) -> None:
        blocked.discard(task)
        if not task.cancelled():
            task.exception()  # seen: an action cut short by a dismissed dialog is no error

    return forget


def _console(message: ConsoleMessage) -> dict[str, Any]:
    kind = message.type
    level = {"warning": "warn"}.get(
        kind, kind if kind in ("log", "warn", "error", "info", "debug") else "log"
    )
    return {"level": level, "text": message.text}


def _request(request: Request) -> dict[str, Any]:
    return {"method": request.method, "url": request.url, "resourceType": request.resource_type}


class Drivers:
    """One driver per connected session, and the Playwright process they share (started on
    first use: a service that never drives a browser never starts it)."""

    def __init__(self) -> None:
        self._manager: Any = None
        self._playwright: Playwright | None = None
        self._drivers: dict[str, BrowserDriver] = {}
        self._connecting: dict[str, asyncio.Lock] = {}

    async def driver(self, session_id: str, cdp_url: str, headers: dict[str, str]) -> BrowserDriver:
        # One connection a session (the relay takes one client): concurrent tool calls wait
        # for the first one's connection instead of opening a second.
        async with self._connecting.setdefault(session_id, asyncio.Lock()):
            found = self._drivers.get(session_id)
            if found is not None and found.connected:
                return found
            if self._playwright is None:
                from playwright.async_api import async_playwright

                self._manager = async_playwright()
                self._playwright = await self._manager.start()
            driver = BrowserDriver(self._playwright, cdp_url, headers)
            await driver.connect()
            self._drivers[session_id] = driver
            return driver

    async def drop(self, session_id: str) -> None:
        """Disconnect a session's driver, if there is one."""
        driver = self._drivers.pop(session_id, None)
        if driver is not None:
            with contextlib.suppress(PlaywrightError):
                await driver.close()

    async def close(self) -> None:
        for driver in self._drivers.values():
            with contextlib.suppress(PlaywrightError):
                await driver.close()
        self._drivers.clear()
        if self._manager is not None:
            await self._manager.__aexit__(None, None, None)
            self._manager = self._playwright = None
