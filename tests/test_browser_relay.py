"""The CDP relay with a real headless Chromium behind an extension stand-in, and Playwright (or
a raw CDP client) in front: pages on loopback, tabs, cross-origin frames, ordering, tokens,
malformed frames, an extension that drops mid-command, and the setup page in a real browser."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from browser_relay.server import CDP_TOKEN_HEADER, RelayServer
from browser_relay.sessions import RELAY_TOKEN_SECONDS, SETUP_TOKEN_SECONDS, BrowserSessions
from tests.browser_fixtures import CHROMIUM_ARGS, Chromium, chromium, extension, serve_pages

__all__ = ["chromium"]  # fixtures, shared

FORM = """<html><head><title>Sign up</title></head><body>
<input id="name" aria-label="Name"><button id="go" onclick="
  document.getElementById('out').textContent = 'Hello, ' + document.getElementById('name').value
">Greet</button><p id="out"></p>
<iframe id="embed" src="http://localhost:{port}/frame"></iframe></body></html>"""
FRAME = (
    """<html><body><button onclick="this.textContent = 'pressed'">press</button></body></html>"""
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def pages() -> AsyncIterator[str]:
    """Test pages on 127.0.0.1; the form embeds a frame from `localhost` (another site)."""
    async with serve_pages({"/form": FORM, "/frame": FRAME}) as base:
        yield base


@pytest.fixture
async def clock() -> Clock:
    return Clock()


@pytest.fixture
async def relay(clock: Clock) -> AsyncIterator[RelayServer]:
    server = await RelayServer(BrowserSessions(grace_seconds=3, clock=clock)).start()
    yield server
    await server.close()


def extension_url(relay: RelayServer, key: str) -> str:
    session = relay.sessions.session(key)
    token = relay.sessions.mint_relay_token(session)
    return f"{relay.ws_url}/extension/{session.id}?token={token.value}"


async def attach_playwright(playwright: Any, relay: RelayServer, key: str) -> Browser:
    endpoints = relay.endpoints(key)
    browser: Browser = await playwright.chromium.connect_over_cdp(
        endpoints.cdp_url, headers=endpoints.cdp_headers
    )
    return browser


async def test_playwright_drives_a_real_tab_through_the_relay(
    relay: RelayServer, chromium: Chromium, pages: str
) -> None:
    async with extension(chromium.http, extension_url(relay, "user-1")), async_playwright() as pw:
        browser = await attach_playwright(pw, relay, "user-1")
        context = browser.contexts[0]
        page = context.pages[0]
        await page.goto(f"{pages}/form")
        await page.fill("#name", "Ada")
        await page.click("#go")
        assert await page.text_content("#out") == "Hello, Ada"
        assert await page.evaluate("1 + 1") == 2
        assert await page.title() == "Sign up"
        snapshot = await page.locator("body").aria_snapshot()
        assert 'button "Greet"' in snapshot
        shot = await page.screenshot()
        assert shot.startswith(b"\x89PNG") and len(shot) > 1000

        # The frame is another site: Chromium runs it out of process, on a child session.
        frame = next(f for f in page.frames if f.url.endswith("/frame"))
        assert frame.url.startswith("http://localhost:")
        await frame.click("button")
        assert await frame.text_content("button") == "pressed"

        # New tabs are created by the relay (Target.createTarget) and closed cleanly.
        second = await context.new_page()
        await second.goto(f"{pages}/frame")
        assert len(context.pages) == 2
        await second.close()
        assert len(context.pages) == 1
        await browser.close()


async def test_replies_never_overtake_the_events_before_them(
    relay: RelayServer, chromium: Chromium
) -> None:
    async with extension(chromium.http, extension_url(relay, "burst")):
        endpoints = relay.endpoints("burst")
        async with connect(endpoints.cdp_url, additional_headers=endpoints.cdp_headers) as cdp:
            session = await auto_attach(cdp)
            await cdp.send(json.dumps({"id": 2, "sessionId": session, "method": "Runtime.enable"}))
            burst = "for (let i = 0; i < 400; i++) console.log('n' + i); 'done'"
            await cdp.send(
                json.dumps(
                    {
                        "id": 3,
                        "sessionId": session,
                        "method": "Runtime.evaluate",
                        "params": {"expression": burst},
                    }
                )
            )
            logged = 0
            while True:
                message = json.loads(await cdp.recv())
                if message.get("method") == "Runtime.consoleAPICalled":
                    logged += 1
                if message.get("id") == 3:
                    break
            assert message["result"]["result"]["value"] == "done"
            assert logged == 400  # every event the page sent before the reply came before it


async def test_tokens_guard_both_sides(
    relay: RelayServer, clock: Clock, chromium: Chromium
) -> None:
    session = relay.sessions.session("guarded")
    endpoints = relay.endpoints("guarded")
    for headers in ({}, {CDP_TOKEN_HEADER: "cdp_wrong"}):
        with pytest.raises(InvalidStatus) as refused:
            await connect(endpoints.cdp_url, additional_headers=headers)
        assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as refused:
        await connect(f"{relay.ws_url}/extension/{session.id}?token=bu_guess")
    assert refused.value.response.status_code == 403

    # A relay token must be used within 5 minutes...
    stale = extension_url(relay, "guarded")
    clock.now += RELAY_TOKEN_SECONDS + 1
    with pytest.raises(InvalidStatus):
        await connect(stale)
    # ...and once used it stays valid, so the extension can reconnect later.
    fresh = extension_url(relay, "guarded")
    async with extension(chromium.http, fresh):
        pass
    clock.now += RELAY_TOKEN_SECONDS + 1
    async with extension(chromium.http, fresh):
        assert relay.sessions.session("guarded").relay.state == "connected"
    # Minting a new link retires the old token.
    extension_url(relay, "guarded")
    with pytest.raises(InvalidStatus):
        await connect(fresh)


async def test_the_setup_token_is_stable_until_it_expires(relay: RelayServer, clock: Clock) -> None:
    import httpx

    first = relay.endpoints("person").setup_url
    assert relay.endpoints("person").setup_url == first
    async with httpx.AsyncClient() as client:
        status = (await client.get(first.replace("/connect?", "/status?"))).json()
        assert status == {"state": "waiting", "connected": False, "connectedAt": None}
        clock.now += SETUP_TOKEN_SECONDS + 1
        expired = await client.get(first.replace("/connect?", "/status?"))
        unknown = await client.get(f"{relay.http_url}/browser/status?token=bus_nope")
        assert expired.status_code == unknown.status_code == 404
        assert expired.json() == unknown.json()
        assert relay.endpoints("person").setup_url != first
        upgrade_needed = await client.get(
            relay.endpoints("person").cdp_url.replace("ws:", "http:"),
            headers={CDP_TOKEN_HEADER: relay.sessions.session("person").cdp_token},
        )
        assert upgrade_needed.status_code == 426


async def test_a_path_like_or_huge_key_is_only_ever_a_hash(relay: RelayServer) -> None:
    for key in ("../../etc/passwd", "x" * 100_000, "agent|draft-chat:1/../../"):
        session = relay.sessions.session(key)
        assert len(session.id) == 32 and all(c in "0123456789abcdef" for c in session.id)
        assert session.id in relay.endpoints(key).cdp_url


async def test_a_malformed_frame_is_refused_and_the_connection_kept(
    relay: RelayServer, chromium: Chromium, pages: str
) -> None:
    async with (
        extension(chromium.http, extension_url(relay, "noisy")) as stand_in,
        async_playwright() as pw,
    ):
        for junk in (
            "{not json",
            "[1, 2]",
            '{"method": "explode"}',
            '{"id": "x"}',
            '{"method": "forwardCDPEvent", "params": {}}',
        ):
            await stand_in.send_raw(junk)
        browser = await attach_playwright(pw, relay, "noisy")
        page = browser.contexts[0].pages[0]
        await page.goto(f"{pages}/frame")
        assert await page.text_content("button") == "press"
        notices = [m for m in stand_in.received if m.get("method") == "error"]
        assert len(notices) == 5
        assert "not JSON" in notices[0]["params"]["message"]
        await browser.close()


async def test_an_extension_that_drops_mid_command_fails_it_and_may_come_back(
    relay: RelayServer, chromium: Chromium, pages: str
) -> None:
    url = extension_url(relay, "flaky")
    async with async_playwright() as pw:
        async with extension(chromium.http, url) as stand_in:
            browser = await attach_playwright(pw, relay, "flaky")
            page = browser.contexts[0].pages[0]
            await page.goto(f"{pages}/frame")
            stand_in.drop_on.add("Runtime.callFunctionOn")
            stand_in.drop_on.add("Runtime.evaluate")
            with pytest.raises(Exception) as failed:
                await asyncio.wait_for(page.evaluate("() => 41 + 1"), timeout=10)
            # It failed at once (Playwright words the relay's error as a lost context).
            assert not isinstance(failed.value, TimeoutError)
            assert relay.sessions.session("flaky").relay.state == "reconnecting"
        # Back within the grace period: the tab is attached afresh, as a new page.
        async with extension(chromium.http, url):
            context = browser.contexts[0]
            for _ in range(100):
                if context.pages and context.pages[0] is not page:
                    break
                await asyncio.sleep(0.05)
            assert page.is_closed()
            again = context.pages[0]
            assert again.url == f"{pages}/frame"
            assert await asyncio.wait_for(again.evaluate("() => 41 + 1"), timeout=10) == 42
            await browser.close()


async def test_the_relay_says_why_a_command_failed_when_the_extension_dropped(
    relay: RelayServer, chromium: Chromium
) -> None:
    async with extension(chromium.http, extension_url(relay, "raw")) as stand_in:
        endpoints = relay.endpoints("raw")
        async with connect(endpoints.cdp_url, additional_headers=endpoints.cdp_headers) as cdp:
            session = await auto_attach(cdp)
            stand_in.drop_on.add("Runtime.evaluate")
            reply = await evaluate_one(cdp, session, 7)
            assert "extension disconnected while this command ran" in reply["error"]["message"]
            reply = await evaluate_one(cdp, session, 8)
            assert reply["error"]["message"] == (
                "no browser is connected to this session (the extension is reconnecting)"
            )


async def auto_attach(cdp: Any) -> str:
    """Attach the person's tab the way Playwright does; its session id."""
    await cdp.send(
        json.dumps(
            {
                "id": 1,
                "method": "Target.setAutoAttach",
                "params": {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True},
            }
        )
    )
    while True:
        message = json.loads(await cdp.recv())
        if message.get("method") == "Target.attachedToTarget":
            return str(message["params"]["sessionId"])


async def evaluate_one(cdp: Any, session: str, call_id: int) -> dict[str, Any]:
    """Send `Runtime.evaluate("1")` on a tab's session; its reply."""
    params = {"expression": "1"}
    await cdp.send(
        json.dumps(
            {"id": call_id, "sessionId": session, "method": "Runtime.evaluate", "params": params}
        )
    )
    return await reply_to(cdp, call_id)


async def reply_to(cdp: Any, call_id: int) -> dict[str, Any]:
    while True:
        message = json.loads(await asyncio.wait_for(cdp.recv(), timeout=10))
        if message.get("id") == call_id:
            return dict(message)


async def test_without_a_reconnect_the_client_is_closed_after_the_grace_period(
    relay: RelayServer, chromium: Chromium, pages: str
) -> None:
    async with async_playwright() as pw:
        async with extension(chromium.http, extension_url(relay, "gone")):
            browser = await attach_playwright(pw, relay, "gone")
            disconnected = asyncio.Event()
            browser.on("disconnected", lambda _b: disconnected.set())
        await asyncio.wait_for(disconnected.wait(), timeout=10)
        assert relay.sessions.session("gone").relay.state == "waiting"


async def test_one_client_per_side(relay: RelayServer, chromium: Chromium) -> None:
    async with extension(chromium.http, extension_url(relay, "single")):
        endpoints = relay.endpoints("single")
        async with connect(endpoints.cdp_url, additional_headers=endpoints.cdp_headers) as first:
            second = await connect(endpoints.cdp_url, additional_headers=endpoints.cdp_headers)
            await second.wait_closed()
            assert second.close_code == 1008
            await first.send(json.dumps({"id": 1, "method": "Browser.getVersion"}))
            assert json.loads(await first.recv())["result"]["protocolVersion"] == "1.3"


async def test_the_setup_page_shows_waiting_then_connected(
    relay: RelayServer, chromium: Chromium
) -> None:
    setup_url = relay.endpoints("visitor").setup_url
    executable = shutil.which("chromium")
    async with async_playwright() as pw:
        viewer = await pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = await viewer.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(setup_url)
        await page.wait_for_function(
            "document.getElementById('state').textContent.startsWith('Waiting')"
        )
        relay_url = await page.text_content("#relay-url")
        assert relay_url and relay_url.startswith(f"{relay.ws_url}/extension/")
        async with extension(chromium.http, relay_url):
            await page.wait_for_function(
                "document.getElementById('state').textContent.startsWith('Connected')",
                timeout=10_000,
            )
        bad = await viewer.new_page()
        await bad.goto(setup_url.replace("token=bus_", "token=bus_x"))
        assert "not valid" in (await bad.text_content("body") or "")
        await viewer.close()
    assert errors == []


async def test_the_relay_runs_on_its_own_from_the_command_line() -> None:
    import httpx

    from tests.test_cli import CLI

    process = await asyncio.create_subprocess_exec(
        CLI, "browser-relay", "--key", "../odd key", stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    printed = json.loads(await asyncio.wait_for(process.stdout.readline(), timeout=60))
    async with httpx.AsyncClient() as client:
        page = await client.get(printed["setupUrl"])
    assert page.status_code == 200 and "Connect your browser" in page.text
    assert printed["cdpUrl"].startswith("ws://127.0.0.1:")
    assert list(printed["cdpHeaders"]) == [CDP_TOKEN_HEADER]
    process.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(process.wait(), timeout=30) == 0


async def test_a_crashed_page_does_not_wedge_the_session(
    relay: RelayServer, chromium: Chromium, pages: str
) -> None:
    async with (
        extension(chromium.http, extension_url(relay, "crashy")),
        async_playwright() as pw,
    ):
        browser = await attach_playwright(pw, relay, "crashy")
        context = browser.contexts[0]
        page = context.pages[0]
        await page.goto(f"{pages}/frame")
        crashed = asyncio.Event()
        page.on("crash", lambda _page: crashed.set())
        with contextlib.suppress(Exception):  # the renderer dies before it can answer
            await asyncio.wait_for(page.goto("chrome://crash"), timeout=10)
        await asyncio.wait_for(crashed.wait(), timeout=10)
        # The session goes on: a new tab works, through the same relay and extension.
        fresh = await context.new_page()
        await fresh.goto(f"{pages}/frame")
        assert await fresh.text_content("button") == "press"
        await browser.close()
