"""fetch-url and web-search against local servers on loopback: the SSRF rules (a victim server
that must see zero connections), content extraction, redirects, size caps, host approval, and
the search cache."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from aiohttp import web

from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from server.settings import Settings
from tests.agent_fixtures import Chat, last_tool_results, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.tool_client import ToolClient

__all__ = ["model"]  # fixtures, shared

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
    running = Servers()
    await running.start()
    yield running
    await running.close()


def web_settings(
    make_settings: Callable[..., Settings], servers: Servers, **extra: Any
) -> Settings:
    return make_settings(
        web_fetch_allow_hosts=[f"127.0.0.1:{servers.site_port}"],
        searxng_url=servers.url(""),
        **extra,
    )


ALLOW = {"fetchUrl": "always_allow", "webSearch": "always_allow"}


async def test_internal_addresses_are_refused_before_any_connection(
    make_settings: Callable[..., Settings], servers: Servers
) -> None:
    v = servers.victim_port
    async with serving(web_settings(make_settings, servers, permissions=ALLOW)) as (_app, channel):
        tools = ToolClient(channel, "w1")
        for url in [
            f"http://127.0.0.1:{v}/",
            f"http://localhost:{v}/",
            f"http://[::1]:{v}/",
            "http://169.254.169.254/latest/meta-data/",
            f"http://2130706433:{v}/",
            f"http://0x7f000001:{v}/",
            f"http://[::ffff:127.0.0.1]:{v}/",
            f"http://10.0.0.5:{v}/",
            f"http://100.64.0.1:{v}/",
            servers.url("/to-victim"),
            f"ftp://127.0.0.1:{v}/",
            f"http://user:pw@127.0.0.1:{servers.site_port}/article",
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await tools.call("fetch-url", url=url)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, url
            assert any(
                word in (refused.value.details() or "")
                for word in ("internal address", "only http and https", "credentials in the URL")
            ), (url, refused.value.details())
    assert servers.victim_hits == 0


async def test_pages_pdfs_text_redirects_and_size_caps(
    make_settings: Callable[..., Settings], servers: Servers
) -> None:
    async with serving(web_settings(make_settings, servers, permissions=ALLOW)) as (_app, channel):
        tools = ToolClient(channel, "w1")
        page = await tools.call("fetch-url", url=servers.url("/article"))
        assert page["title"] == "Shipping orders faster"
        assert "dedicated packing bench" in page["content"]
        assert (
            "MENU-NAVIGATION-LINKS" not in page["content"]
            and "FOOTER-COPYRIGHT" not in page["content"]
        )
        assert page["truncated"] is False and page["contentLength"] == len(page["content"])
        short = await tools.call("fetch-url", url=servers.url("/article"), maxContentLength=50)
        assert len(short["content"]) == 50 and short["truncated"] is True
        pdf = await tools.call("fetch-url", url=servers.url("/report.pdf"))
        assert "Quarterly revenue grew 12 percent" in pdf["content"]
        notes = await tools.call("fetch-url", url=servers.url("/notes.txt"))
        assert notes["content"] == "plain notes\nline two"
        hops = await tools.call("fetch-url", url=servers.url("/hop/10"))
        assert hops["finalUrl"] == servers.url("/hop/0") and hops["content"] == "arrived"
        with pytest.raises(grpc.aio.AioRpcError) as too_many:
            await tools.call("fetch-url", url=servers.url("/hop/11"))
        assert "more than 10 redirects" in (too_many.value.details() or "")
        big = await tools.call("fetch-url", url=servers.url("/big"), maxContentLength=100)
        assert big["truncated"] is True and big["safetyFlags"] == ["body_cut_at_5mb"]
        assert big["contentLength"] == 5 * 1024 * 1024


async def test_a_new_host_needs_the_users_approval(
    make_settings: Callable[..., Settings], servers: Servers, model: FakeMessagesAPI
) -> None:
    model.script(
        tool("fetch-url", {"url": servers.url("/notes.txt")}),
        tool("fetch-url", {"url": servers.url("/article")}),
        text("read both"),
    )
    settings = web_settings(make_settings, servers, **with_model(model))
    async with serving(settings) as (_app, channel):
        with pytest.raises(grpc.aio.AioRpcError) as direct:
            await ToolClient(channel, "w1").call("fetch-url", url=servers.url("/notes.txt"))
        assert direct.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        chat = Chat(channel)
        run_id = await chat.send("w1", "read the notes")
        card = await chat.card("w1")
        assert card["domainAccess"] == {"url": servers.url("/notes.txt"), "host": "127.0.0.1"}
        await chat.confirm(
            "w1", card["requestId"], kind="domainAccessApprove", domainAccessAction="allow_domain"
        )
        events = await chat.finished("w1", run_id)
    assert len([e for e in events if e["type"] == "confirmation-request"]) == 1  # remembered
    first = json.loads(last_tool_results(model.requests[1])[0]["content"])
    second = json.loads(last_tool_results(model.requests[2])[0]["content"])
    assert first["content"] == "plain notes\nline two" and "packing bench" in second["content"]


async def test_web_search_is_cached_filtered_and_only_registered_when_configured(
    make_settings: Callable[..., Settings], servers: Servers
) -> None:
    async with serving(web_settings(make_settings, servers, permissions=ALLOW)) as (_app, channel):
        tools = ToolClient(channel, "w1")
        found = await tools.call("web-search", query="n8n webhooks", maxResults=5)
        assert [r["title"] for r in found["results"]] == [
            "n8n webhooks guide",
            "n8n webhooks forum",
        ]
        again = await tools.call("web-search", query="N8N webhooks ", maxResults=5)
        assert again["results"] == found["results"] and servers.search_hits == 1
        only = await tools.call("web-search", query="n8n", includeDomains=["example.org"])
        assert [r["url"] for r in only["results"]] == ["https://docs.example.org/guide"]
    async with serving(make_settings()) as (_app, channel):
        listed = await tools_pb2_grpc.ToolsStub(channel).ListTools(
            tools_pb2.ListToolsRequest(include_unavailable=True)
        )
        search = next(t for t in listed.tools if t.name == "web-search")
        assert not search.available and "SEARXNG" in search.requires
