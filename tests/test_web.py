"""fetch-url and web-search against local servers on loopback: the SSRF rules (a victim server
that must see zero connections), content extraction, redirects, size caps, host approval, and
the search cache."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from server.settings import Settings
from tests.agent_fixtures import Chat, last_tool_results, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.tool_client import ToolClient
from tests.web_servers import Servers, servers

__all__ = ["model", "servers"]  # fixtures, shared


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
        # The page is cached now, but the cache is no way around another thread's approval.
        with pytest.raises(grpc.aio.AioRpcError) as other_thread:
            await ToolClient(channel, "w2").call("fetch-url", url=servers.url("/notes.txt"))
        assert other_thread.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        again = await ToolClient(channel, "w1").call("fetch-url", url=servers.url("/notes.txt"))
        assert again["content"] == "plain notes\nline two"  # w1 approved the host
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
