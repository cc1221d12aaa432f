"""Every browser tool through `Tools.CallTool`, on a real headless Chromium tab connected
through the relay by the extension stand-in, against pages served on loopback (a form, a
cross-origin frame, dialogs, an upload, a new tab, a drag)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import httpx
import pytest

from browser_relay.sessions import user_key
from server.app import Application
from server.settings import Settings
from tests.agent_fixtures import Chat, last_tool_results, model, model_settings
from tests.browser_fixtures import Chromium, chromium, extension, serve_pages
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.tool_client import ToolClient, tabs_opened_by

__all__ = ["chromium", "model", "model_settings"]  # fixtures, shared

WHO = (("x-instance-ai-user", "ada"),)

PAGE = """<html><head><title>Workbench</title></head><body>
<h1>Workbench</h1>
<label>Name <input id="who"></label>
<select id="colour"><option value="r">Red</option><option value="g">Green</option></select>
<button id="greet" onclick="out.textContent = 'Hi ' + who.value + ' in ' + colour.value;
  console.error('greeted')">Greet</button>
<p id="out"></p>
<button id="ask" onclick="answer.textContent = prompt('Your city?')">Ask</button>
<p id="answer"></p>
<div id="hoverme" onmouseover="this.textContent = 'hovered'">hover me</div>
<input id="file" type="file" onchange="picked.textContent = this.files[0].name">
<p id="picked"></p>
<button id="popup" onclick="window.open('/other')">Open</button>
<div id="src" draggable="true" ondragstart="event.dataTransfer.setData('text', 'x')">drag</div>
<div id="dst" style="width:80px;height:40px" ondragover="event.preventDefault()"
  ondrop="event.preventDefault(); this.textContent = 'dropped'">drop here</div>
<input id="keys" onkeydown="this.dataset.last = event.key">
<div style="height: 3000px"></div><p id="bottom">the end</p>
<iframe src="http://localhost:{port}/other"></iframe>
<script>fetch('/api/ping')</script>
</body></html>"""
OTHER = "<html><head><title>Other</title></head><body><p>another page</p></body></html>"


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async with serve_pages({"/page": PAGE, "/other": OTHER, "/api/ping": "pong"}) as base:
        yield base


async def connect_browser(app: Application, devtools: str) -> str:
    """The relay URL a person would get from the setup page."""
    setup = app.parts.relay.endpoints(user_key("ada")).setup_url
    async with httpx.AsyncClient() as client:
        link = (await client.get(setup.replace("/connect?", "/connect-link?"))).json()
    return str(link["relayUrl"])


async def test_every_browser_tool_on_a_real_tab(
    make_settings: Callable[..., Settings], chromium: Chromium, site: str
) -> None:
    # Uploads come from the thread's workspace (local directories serve here).
    async with serving(make_settings(sandbox_provider="local")) as (app, channel):
        await app.parts.events.append("browse", "thread-title-updated", {"title": "test"})
        tools = ToolClient(channel, "browse", WHO)
        await tools.call("workspace_write_file", path="report.txt", content="numbers")
        await drive_every_tool(app, tools, chromium, site)


async def drive_every_tool(
    app: Application, tools: ToolClient, chromium: Chromium, site: str
) -> None:
    async with extension(chromium.http, await connect_browser(app, chromium.http)):
        first = (await tools.call("browser_tab_list"))["tabs"]
        assert len(first) == 1 and first[0]["active"]

        page = await tools.call("browser_navigate", url=f"{site}/page")
        assert page["title"] == "Workbench"
        tree = (await tools.call("browser_snapshot"))["snapshot"]
        assert 'button "Greet"' in tree and "[ref=" in tree
        greet_ref = next(
            line.split("[ref=")[1].split("]")[0] for line in tree.splitlines() if '"Greet"' in line
        )

        await tools.call("browser_type", element={"selector": "#who"}, text="Grace")
        await tools.call("browser_select", element={"selector": "#colour"}, values=["g"])
        clicked = await tools.call("browser_click", element={"ref": greet_ref})
        assert clicked["consoleSummary"]["errors"] >= 1  # (the missing favicon is another)
        text = await tools.call(
            "browser_evaluate", script="document.getElementById('out').textContent"
        )
        assert text["result"] == "Hi Grace in g"

        await tools.call("browser_hover", element={"selector": "#hoverme"})
        await tools.call(
            "browser_drag", **{"from": {"selector": "#src"}, "to": {"selector": "#dst"}}
        )
        await tools.call("browser_click", element={"selector": "#keys"})
        await tools.call("browser_press", keys="Shift+KeyA")
        checks = await tools.call(
            "browser_evaluate",
            script="[hoverme.textContent, dst.textContent, keys.dataset.last]",
        )
        assert checks["result"] == ["hovered", "dropped", "A"]

        # A prompt stays open for the agent, which sees it and answers it.
        asked = await tools.call("browser_click", element={"selector": "#ask"})
        assert asked["modalStates"][0]["dialogType"] == "prompt"
        await tools.call("browser_dialog", action="accept", text="Lyon")
        await tools.call("browser_wait", text="Lyon", timeoutMs=5000)

        await tools.call("browser_upload", element={"selector": "#file"}, files=["report.txt"])
        await tools.call("browser_wait", predicate="picked.textContent === 'report.txt'")

        scrolled = await tools.call(
            "browser_scroll", mode="direction", direction="down", amount=800
        )
        assert scrolled["result"]["scrollY"] > 0
        await tools.call("browser_scroll", mode="element", element={"selector": "#bottom"})
        bad = await tools.refused("browser_scroll", mode="element", direction="down")
        assert bad.code() is grpc.StatusCode.INVALID_ARGUMENT and "element" in (bad.details() or "")

        content = await tools.call("browser_content", selector="h1")
        assert content["content"] == "Workbench"
        shot = base64.b64decode((await tools.call("browser_screenshot"))["data"])
        assert shot.startswith(b"\x89PNG")
        pdf = base64.b64decode((await tools.call("browser_pdf"))["data"])
        assert pdf.startswith(b"%PDF")
        errors = (await tools.call("browser_console", level="error", clear=True))["items"]
        assert {"level": "error", "text": "greeted"} in errors
        assert (await tools.call("browser_console", level="error"))["items"] == []
        requests = (await tools.call("browser_network", filter="*/api/*"))["items"]
        assert [r["url"] for r in requests] == [f"{site}/api/ping"]

        stored = await tools.call("browser_storage", action="set", kind="local", data={"k": "v"})
        assert stored["result"] == {"k": "v"}
        cleared = await tools.call("browser_storage", action="clear", kind="local")
        assert cleared["result"] == {}
        cookies = await tools.call(
            "browser_cookies", action="set", cookies=[{"name": "sid", "value": "42"}]
        )
        assert [(c["name"], c["value"]) for c in cookies["items"]] == [("sid", "42")]
        assert (await tools.call("browser_cookies", action="clear"))["items"] == []

        # A page that opens a tab: the next action reports it.
        new_tabs = await tabs_opened_by(tools, element={"selector": "#popup"})
        assert new_tabs and new_tabs[0]["url"].endswith("/other") and not new_tabs[0]["active"]

        tab = (await tools.call("browser_tab_open", url=f"{site}/other"))["tab"]
        assert tab["active"] and tab["title"] == "Other"
        await tools.call("browser_tab_focus", pageId=first[0]["id"])
        await tools.call("browser_navigate", url=f"{site}/other")
        await tools.call("browser_back")
        assert (await tools.call("browser_forward"))["url"].endswith("/other")
        assert (await tools.call("browser_reload"))["title"] == "Other"
        left = (await tools.call("browser_tab_close", pageId=tab["id"]))["tabs"]
        assert tab["id"] not in [t["id"] for t in left]

        missing = await tools.refused("browser_click", element={"selector": "#nope"}, pageId="p99")
        assert missing.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "no tab 'p99'" in (missing.details() or "")


async def test_without_a_browser_a_direct_call_is_refused_with_what_to_do(
    channel: grpc.aio.Channel,
) -> None:
    refused = await ToolClient(channel, "nobrowser", WHO).refused("browser_tab_list")
    assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION


async def test_the_connect_card_through_the_agent_loop(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI, chromium: Chromium
) -> None:
    seen: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> Turn:
        results = last_tool_results(request)
        seen.extend(results)
        if not results:
            return tool("browser_tab_list", {})
        return text("Done.")

    model.responder = answer
    async with serving(model_settings()) as (app, channel):
        chat = Chat(channel)
        # No browser: the call suspends with one card for both surfaces.
        run_id = await chat.send("b1", "List my browser tabs")
        card = await chat.card("b1")
        assert card["type"] == "browser_use_connect"
        assert card["setupUrl"].startswith(app.parts.relay.http_url + "/browser/connect?token=bus_")
        assert (
            card["components"][0]["type"] == "section"
            and card["setupUrl"] in card["components"][0]["text"]
        )
        assert card["components"][1] == {
            "type": "button",
            "label": "I've connected — continue",
            "value": "continue",
            "style": "primary",
        }
        # "I've connected" without connecting: the tool explains instead of asking again.
        await chat.confirm("b1", card["requestId"], kind="approval", approved=True)
        events = await chat.finished("b1", run_id)
        assert [e["type"] for e in events].count("confirmation-request") == 1
        assert seen[-1]["is_error"] and "still not connected" in seen[-1]["content"]

        # Connected through the setup page's link: the same question now has an answer.
        async with httpx.AsyncClient() as client:
            link = (
                await client.get(card["setupUrl"].replace("/connect?", "/connect-link?"))
            ).json()
        async with extension(chromium.http, link["relayUrl"]):
            run_id = await chat.send("b1", "And now?")
            events = await chat.finished("b1", run_id)
        assert [e["type"] for e in events].count("confirmation-request") == 1  # no new card
        listed = json.loads(seen[-1]["content"])
        assert not seen[-1].get("is_error") and len(listed["tabs"]) == 1
