"""Local web servers for the web research tests: a site that may be fetched (through the
allow-list setting), a victim that must never be reached, and a SearXNG stand-in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

ARTICLE = """<html><head><title>Shipping orders faster</title></head><body>
<nav><a href="/">Home</a> <a href="/pricing">Pricing</a> MENU-NAVIGATION-LINKS</nav>
<div class="sidebar">Subscribe to our newsletter! SIDEBAR-ADVERT</div>
<article><h1>Shipping orders faster</h1>
<p>Our warehouse team cut the average time from order to dispatch from two days to four
hours by batching picks and printing labels as soon as payment clears.</p>
<p>The biggest win came from routing urgent orders to a dedicated packing bench, which
removed the queue that used to build up every afternoon at the main station.</p>
<p>Next quarter we will automate the carrier hand-off so that every parcel is booked with
the cheapest carrier that still meets the promised delivery date.</p>
</article><footer>FOOTER-COPYRIGHT</footer></body></html>"""


def pdf_with(text_line: str) -> bytes:
    """A minimal one-page PDF showing `text_line`."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text_line}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


def serve(
    make: Callable[[], web.StreamResponse],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(_request: web.Request) -> web.StreamResponse:
        return make()

    return handler


class Servers:
    """The site the tests may fetch (allow-listed), and a victim that must never be hit."""

    def __init__(self) -> None:
        self.victim_hits = 0
        self.search_hits = 0
        self.site_port = 0
        self.victim_port = 0
        self._runners: list[web.AppRunner] = []

    async def start(self) -> None:
        site = web.Application()
        pdf = pdf_with("Quarterly revenue grew 12 percent")
        routes: dict[str, Callable[[], web.StreamResponse]] = {
            "/article": lambda: web.Response(text=ARTICLE, content_type="text/html"),
            "/report.pdf": lambda: web.Response(body=pdf, content_type="application/pdf"),
            "/notes.txt": lambda: web.Response(text="plain notes\nline two"),
            "/big": lambda: web.Response(text="x" * (6 * 1024 * 1024)),
        }
        for path, make in routes.items():
            site.router.add_get(path, serve(make))
        site.router.add_get("/hop/{n}", self._hop)
        site.router.add_get("/to-victim", self._to_victim)
        site.router.add_get("/search", self._search)
        victim = web.Application()
        victim.router.add_get("/{tail:.*}", self._victim)
        self.site_port = await self._serve(site)
        self.victim_port = await self._serve(victim)

    async def _serve(self, app: web.Application) -> int:
        runner = web.AppRunner(app)
        await runner.setup()
        tcp = web.TCPSite(runner, "127.0.0.1", 0)
        await tcp.start()
        self._runners.append(runner)
        return int(tcp._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def close(self) -> None:
        for runner in self._runners:
            await runner.cleanup()

    async def _victim(self, _request: web.Request) -> web.Response:
        self.victim_hits += 1
        return web.Response(text="internal secrets")

    async def _to_victim(self, _request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.1:{self.victim_port}/")

    async def _hop(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n == 0:
            return web.Response(text="arrived")
        raise web.HTTPFound(f"/hop/{n - 1}")

    async def _search(self, request: web.Request) -> web.Response:
        self.search_hits += 1
        q = request.query["q"]
        results = [
            {"title": f"{q} guide", "url": "https://docs.example.org/guide", "content": "How to"},
            {"title": f"{q} forum", "url": "https://forum.example.net/t/1", "content": "Thread"},
        ]
        return web.json_response({"results": results})

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.site_port}{path}"


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    """The servers, started (a fixture: import it into the test module)."""
    running = Servers()
    await running.start()
    yield running
    await running.close()
