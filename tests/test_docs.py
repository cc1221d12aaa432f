"""n8n-docs: search over the index built from the catalog and the knowledge base (no network),
read and lookup through the web fetcher against a docs site on loopback, and the answer when
the docs site cannot be reached."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from aiohttp import web

from server.domain.docs import credential_docs_url
from server.settings import Settings
from tests.conftest import serving
from tests.tool_client import ToolClient

ALLOW = {"fetchUrl": "always_allow"}


@pytest.fixture
async def docs_site() -> AsyncIterator[tuple[str, list[str]]]:
    """A docs site on loopback: every page is a small article naming its path."""
    asked: list[str] = []

    async def page(request: web.Request) -> web.Response:
        asked.append(request.path)
        body = (
            f"<html><head><title>Docs {request.path}</title></head><body><article>"
            f"<h1>Page {request.path}</h1><p>This page explains {request.path} in enough words "
            "for the readability filter to keep it as the main content of the page.</p>"
            "<p>A second paragraph with setup steps: open the credential, paste the key.</p>"
            "</article></body></html>"
        )
        return web.Response(text=body, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", asked
    await runner.cleanup()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def docs_settings(make: Callable[..., Settings], origin: str, **extra: Any) -> Settings:
    host = origin.removeprefix("http://")
    return make(docs_url=origin, web_fetch_allow_hosts=[host], permissions=ALLOW, **extra)


async def test_search_answers_from_the_built_in_index(
    make_docker_settings: Callable[..., Settings],
) -> None:
    async with serving(make_docker_settings()) as (app, channel):
        tools = ToolClient(channel, "d1")
        await app.parts.events.append("d1", "thread-created")
        catalog = await app.parts.catalog.get()
        gmail = catalog.credentials["gmailOAuth2"]
        found = await tools.call(
            "n8n-docs",
            action="search",
            query="which scopes does it need",
            intent="credential-setup",
            credentialType="gmailOAuth2",
        )
        first = found["matches"][0]
        assert first["credentialType"] == "gmailOAuth2" and first["kind"] == "credential"
        assert first["url"] == credential_docs_url(gmail) and "Source" in found["hint"]
        # A node's own page, with its URL from the node's codex.
        node = await tools.call("n8n-docs", action="search", nodeType="n8n-nodes-base.slack")
        slack = catalog.nodes["n8n-nodes-base.slack"]
        codex_url = slack.codex["resources"]["primaryDocumentation"][0]["url"]
        assert node["matches"][0]["url"] == codex_url
        assert "Message" in node["matches"][0]["summary"]  # its resources
        # Words alone, and the knowledge base (read in the workspace, at its path).
        words = await tools.call("n8n-docs", action="search", query="send a slack message")
        assert words["matches"][0]["nodeType"] == "n8n-nodes-base.slack"
        kb = await tools.call("n8n-docs", action="search", query="side effects pinned data")
        assert kb["matches"][0]["url"] == "knowledge-base/best-practices/pin-side-effects.md"
        hosting = await tools.call("n8n-docs", action="search", query="docker", intent="hosting")
        assert hosting["matches"][0]["url"] == "https://docs.n8n.io/hosting/"
        capped = await tools.call("n8n-docs", action="search", query="google", maxResults=3)
        assert len(capped["matches"]) == 3
        refused = await tools.refused("n8n-docs", action="search")
        assert refused.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "say what to find" in (refused.details() or "")


async def test_read_and_lookup_go_to_the_docs_site(
    make_docker_settings: Callable[..., Settings], docs_site: tuple[str, list[str]]
) -> None:
    origin, asked = docs_site
    async with serving(docs_settings(make_docker_settings, origin)) as (app, channel):
        tools = ToolClient(channel, "d2")
        await app.parts.events.append("d2", "thread-created")
        read = await tools.call("n8n-docs", action="read", url=f"{origin}/hosting/")
        (document,) = read["documents"]
        assert document["source"] == "docs-site" and "Page /hosting/" in document["content"]
        assert read.get("error") is None and asked == ["/hosting/"]
        looked = await tools.call(
            "n8n-docs", action="lookup", nodeType="n8n-nodes-base.slack", maxPages=2
        )
        assert len(looked["documents"]) == 2
        assert looked["documents"][0]["url"] == looked["matches"][0]["url"]
        assert "/n8n-nodes-base.slack/" in asked[1]
        assert all(d["source"] == "docs-site" for d in looked["documents"])
        elsewhere = await tools.refused("n8n-docs", action="read", url="https://example.com/x")
        assert elsewhere.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "fetch-url" in (elsewhere.details() or "")


async def test_an_unreachable_docs_site_is_said_and_the_index_stands_in(
    make_docker_settings: Callable[..., Settings],
) -> None:
    origin = f"http://127.0.0.1:{closed_port()}"
    async with serving(docs_settings(make_docker_settings, origin)) as (app, channel):
        tools = ToolClient(channel, "d3")
        await app.parts.events.append("d3", "thread-created")
        searched = await tools.call("n8n-docs", action="search", nodeType="n8n-nodes-base.slack")
        page = searched["matches"][0]["url"]
        assert page.startswith(origin)  # the index points at the configured site
        read = await tools.call("n8n-docs", action="read", url=page)
        assert "cannot be reached from this deployment" in read["error"]
        (document,) = read["documents"]
        assert document["source"] == "built-in index" and "Slack" in document["content"]
        unknown = await tools.call("n8n-docs", action="read", url=f"{origin}/nowhere/")
        assert unknown["documents"] == [] and "not in the built-in index" in unknown["error"]


async def test_reading_the_docs_asks_for_the_host_unless_allowed(
    make_docker_settings: Callable[..., Settings], docs_site: tuple[str, list[str]]
) -> None:
    origin, asked = docs_site
    settings = docs_settings(make_docker_settings, origin)
    settings = settings.model_copy(update={"permissions": {}})
    async with serving(settings) as (app, channel):
        tools = ToolClient(channel, "d4")
        await app.parts.events.append("d4", "thread-created")
        refused = await tools.refused("n8n-docs", action="read", url=f"{origin}/api/")
        assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert asked == []
        # Search reads nothing, so it needs no approval.
        assert (await tools.call("n8n-docs", action="search", query="api"))["matches"]
