"""Sandboxed browser benchmark: the headless Chromium in a thread's sandbox, driven through the
relay (CDP pipe over an attached `docker exec`, `PipeExtension`), beside the same Chromium run
straight on the host with Playwright attached to its DevTools port, in the same run.

Three figures, the two browsers interleaved round by round:
- start: from nothing to a page Playwright can use (sandbox already running; the host one
  started the same way each round);
- one CDP round trip: `page.evaluate("1")`, p50;
- a navigate + fill + click + read round trip on the same page (a `data:` URL: both reach it).

    python -m bench.sandbox_browser [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from urllib.parse import quote

from playwright.async_api import Page, async_playwright

from bench.relay import round_trip, timed
from bench.sandbox import cleanup
from bench.summary import record
from browser_relay.driver import Drivers
from browser_relay.headless import HeadlessBrowsers
from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSessions, sandbox_key
from sandbox.docker_engine import DockerEngine
from sandbox.image.build import image_tags
from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider
from server.logs import configure_logging
from tests.browser_fixtures import run_chromium

PAGE = "data:text/html," + quote(
    """<html><body><input id="name"><button id="go" onclick="
  out.textContent = 'Hello, ' + document.getElementById('name').value">Go</button>
  <p id="out"></p></body></html>"""
)


async def main(rounds: int) -> None:
    configure_logging(level="warning")
    engine = DockerEngine.connect()
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    manager = SandboxManager(SandboxProvider(engine, image=image_tags()[-1], owner=owner))
    relay = await RelayServer(BrowserSessions()).start()
    headless, drivers = HeadlessBrowsers(relay), Drivers()
    starts: dict[str, list[float]] = {"sandbox": [], "host": []}
    evaluate: dict[str, list[float]] = {"sandbox": [], "host": []}
    trips: dict[str, list[float]] = {"sandbox": [], "host": []}
    try:
        await manager.acquire("bench")
        async with async_playwright() as pw:
            for _ in range(rounds):
                started = time.perf_counter()
                session = await headless.ensure(
                    sandbox_key("bench"), lambda: manager.open_browser("bench")
                )
                driver = await drivers.driver(session.id, *relay.cdp_endpoint(session))
                starts["sandbox"].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                with run_chromium() as host_chromium:
                    host = await pw.chromium.connect_over_cdp(host_chromium.http)
                    starts["host"].append((time.perf_counter() - started) * 1000)
                    pages: dict[str, Page] = {
                        "sandbox": driver.page(None),
                        "host": host.contexts[0].pages[0],
                    }
                    for page in pages.values():
                        await round_trip(page, PAGE)  # warm
                    for name, page in pages.items():
                        for _ in range(20):
                            evaluate[name].append(await timed(lambda p=page: p.evaluate("1")))
                        trips[name].append(await timed(lambda p=page: round_trip(p, PAGE)))
                    await host.close()
                await drivers.drop(session.id)
                await headless.stop(sandbox_key("bench"))
    finally:
        await drivers.close()
        await headless.close()
        await relay.close()
        await manager.close()
        cleanup(engine, owner)
        engine.close()

    def p50(values: list[float]) -> float:
        return statistics.median(values)

    print(f"sandboxed browser (relay + docker exec pipe) vs host Chromium, {rounds} rounds")
    for label, figures in (
        ("start to a usable page", starts),
        ("one CDP round trip (evaluate '1')", evaluate),
        ("navigate + fill + click + read", trips),
    ):
        ours, base = p50(figures["sandbox"]), p50(figures["host"])
        print(f"  {label}, p50: host {base:.2f} ms, sandbox {ours:.2f} ms ({ours / base:.2f}x)")
        record(
            "sandbox browser",
            f"{label}, p50",
            ours,
            base,
            "ms",
            note="baseline: Chromium on the host",
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args().rounds))
