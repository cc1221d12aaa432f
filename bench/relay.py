"""Relay benchmark: what the CDP relay adds per command, beside Playwright attached straight to
the same headless Chromium (`connect_over_cdp` on its DevTools port) in the same run.

Two figures, each through the relay (with the tests' extension stand-in playing the extension)
and direct, interleaved round by round so the machine's noise hits both alike:
- one CDP round trip: `page.evaluate("1")`, p50 over many calls (target: ≤ 1 ms added);
- a navigate + fill + click + read round trip on a local page.

The stand-in is a second Python hop that the real extension replaces, so a third client goes
through one plain WebSocket forwarder (the same library, no relay logic) to a third browser:
what one such hop costs. The relay's own share is the relay's figure less that hop.

    python -m bench.relay [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from playwright.async_api import Page, async_playwright
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from bench.summary import record
from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSessions
from browser_relay.wire import MAX_MESSAGE_BYTES
from tests.browser_fixtures import extension, run_chromium, serve_pages

PAGE = """<html><body><input id="name"><button id="go" onclick="
  out.textContent = 'Hello, ' + document.getElementById('name').value">Go</button>
  <p id="out"></p></body></html>"""


async def timed(action: Callable[..., Awaitable[object]]) -> float:
    started = time.perf_counter()
    await action()
    return (time.perf_counter() - started) * 1000


async def round_trip(page: Page, url: str) -> None:
    await page.goto(url)
    await page.fill("#name", "Ada")
    await page.click("#go")
    await page.text_content("#out")


async def main(rounds: int) -> None:
    async with serve_pages({"/": PAGE}) as base:
        await compare(base + "/", rounds)


async def compare(url: str, rounds: int) -> None:
    # Two browsers: a CDP client attached straight to a browser attaches to all its tabs,
    # and would also act on the tab behind the relay.
    with run_chromium() as behind_relay, run_chromium() as plain, run_chromium() as hopped:
        async with forwarder(hopped.http) as hop_url:
            await measure(behind_relay.http, plain.http, hop_url, url, rounds)


@contextlib.asynccontextmanager
async def forwarder(devtools: str) -> AsyncIterator[str]:
    """One WebSocket hop and nothing else: every frame passed on as it is, both ways."""
    async with httpx.AsyncClient() as client:
        browser_ws = (await client.get(f"{devtools}/json/version")).json()["webSocketDebuggerUrl"]

    async def pass_on(client_side: ServerConnection) -> None:
        async with connect(browser_ws, max_size=MAX_MESSAGE_BYTES) as browser:

            async def pump(source: Any, sink: Any) -> None:
                with contextlib.suppress(ConnectionClosed):  # either side leaving ends it
                    async for frame in source:
                        await sink.send(frame)

            await asyncio.gather(pump(client_side, browser), pump(browser, client_side))

    async with serve(pass_on, "127.0.0.1", 0, max_size=MAX_MESSAGE_BYTES) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/"


async def measure(devtools: str, direct_devtools: str, hop_url: str, url: str, rounds: int) -> None:
    relay = await RelayServer(BrowserSessions()).start()
    session = relay.sessions.session("bench")
    token = relay.sessions.mint_relay_token(session).value
    relay_url = f"{relay.ws_url}/extension/{session.id}?token={token}"
    try:
        async with extension(devtools, relay_url), async_playwright() as pw:
            endpoints = relay.endpoints("bench")
            relayed = await pw.chromium.connect_over_cdp(
                endpoints.cdp_url, headers=endpoints.cdp_headers
            )
            direct = await pw.chromium.connect_over_cdp(direct_devtools)
            hopped = await pw.chromium.connect_over_cdp(hop_url)
            via_relay = relayed.contexts[0].pages[0]
            straight = direct.contexts[0].pages[0]
            one_hop = hopped.contexts[0].pages[0]
            clients = (("relay", via_relay), ("direct", straight), ("hop", one_hop))
            for _name, page in clients:
                await round_trip(page, url)  # warm
            evaluate: dict[str, list[float]] = {name: [] for name, _page in clients}
            trips: dict[str, list[float]] = {name: [] for name, _page in clients}
            for _ in range(rounds):
                for name, page in clients:
                    for _ in range(20):
                        evaluate[name].append(await timed(lambda p=page: p.evaluate("1")))
                    trips[name].append(await timed(lambda p=page: round_trip(p, url)))
            await relayed.close()
            await direct.close()
            await hopped.close()
    finally:
        await relay.close()

    def p50(values: list[float]) -> float:
        return statistics.median(values)

    added = p50(evaluate["relay"]) - p50(evaluate["direct"])
    hop = p50(evaluate["hop"]) - p50(evaluate["direct"])
    print(
        f"relay (with the extension stand-in: two Python hops) vs direct connect_over_cdp, "
        f"{rounds} interleaved rounds"
    )
    print(
        f"  one CDP round trip (evaluate '1'), p50: direct {p50(evaluate['direct']):.2f} ms, "
        f"relay {p50(evaluate['relay']):.2f} ms: +{added:.2f} ms per command "
        f"({p50(evaluate['relay']) / p50(evaluate['direct']):.2f}x)"
    )
    print(
        f"  one plain WebSocket hop (the stand-in's share), p50: {p50(evaluate['hop']):.2f} ms: "
        f"+{hop:.2f} ms; so the relay itself adds +{added - hop:.2f} ms per command"
    )
    print(
        f"  navigate + fill + click + read, p50: direct {p50(trips['direct']):.1f} ms, "
        f"relay {p50(trips['relay']):.1f} ms "
        f"({p50(trips['relay']) / p50(trips['direct']):.2f}x)"
    )
    record(
        "relay",
        "one CDP round trip through the relay, p50",
        p50(evaluate["relay"]),
        p50(evaluate["direct"]),
        "ms",
        note="baseline: direct connect_over_cdp",
    )
    record(
        "relay",
        "navigate + fill + click + read through the relay, p50",
        p50(trips["relay"]),
        p50(trips["direct"]),
        "ms",
        note="baseline: direct connect_over_cdp",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(main(parser.parse_args().rounds))
