"""The real extension, unpacked into a real headless Chromium: it connects to the relay from its
service worker, attaches the shared tab with chrome.debugger, and Playwright drives that tab
through the relay. Its link policy refuses relays other than loopback or the service."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Worker, async_playwright

from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSessions
from tests.browser_fixtures import CHROMIUM_ARGS, serve_pages

EXTENSION = Path(__file__).resolve().parents[1] / "browser_relay" / "extension"
PAGE = """<html><head><title>Shared</title></head><body><input id="who">
<button onclick="out.textContent = 'Hello, ' + who.value">Go</button><p id="out"></p>
<button id="popup" onclick="window.open('/')">Open</button></body></html>"""


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async with serve_pages({"/": PAGE}) as base:
        yield base + "/"


async def worker_of(context: BrowserContext) -> Worker:
    for worker in context.service_workers:
        if worker.url.endswith("/background.js"):
            return worker
    return await context.wait_for_event("serviceworker", timeout=15_000)


async def test_playwright_drives_a_tab_shared_by_the_real_extension(
    tmp_path: Path, site: str
) -> None:
    relay = await RelayServer(BrowserSessions()).start()
    session = relay.sessions.session("person")
    token = relay.sessions.mint_relay_token(session).value
    link = f"{relay.ws_url}/extension/{session.id}?token={token}"
    try:
        async with async_playwright() as pw:
            person = await pw.chromium.launch_persistent_context(
                str(tmp_path / "profile"),
                executable_path=shutil.which("chromium"),
                headless=True,
                args=[
                    *CHROMIUM_ARGS,
                    f"--disable-extensions-except={EXTENSION}",
                    f"--load-extension={EXTENSION}",
                ],
            )
            shared = person.pages[0] if person.pages else await person.new_page()
            await shared.goto(site)
            worker = await worker_of(person)

            refused = await worker.evaluate(
                "url => instanceAi.connect(url, 1).then(() => 'connected', e => e.message)",
                link.replace("127.0.0.1", "relay.example.com"),
            )
            assert refused.startswith("this extension only connects to this computer")

            tab_id = await worker.evaluate(
                "url => chrome.tabs.query({url}).then(tabs => tabs[0].id)", site
            )
            await worker.evaluate("([url, tab]) => instanceAi.connect(url, tab)", [link, tab_id])
            assert session.relay.state == "connected"

            endpoints = relay.endpoints("person")
            agent = await pw.chromium.connect_over_cdp(
                endpoints.cdp_url, headers=endpoints.cdp_headers
            )
            page = agent.contexts[0].pages[0]
            assert page.url == site
            await page.fill("#who", "Ada")
            await page.click("text=Go")
            assert await page.text_content("#out") == "Hello, Ada"
            # The person sees it: the shared tab carries the extension's badge.
            badge = await worker.evaluate("tab => chrome.action.getBadgeText({tabId: tab})", tab_id)
            assert badge == "AI"
            status = await worker.evaluate("instanceAi.status()")
            assert status["connected"] and status["tabs"] == [tab_id]

            await worker.evaluate("instanceAi.disconnect()")
            await agent.close()
            await person.close()
    finally:
        await relay.close()
