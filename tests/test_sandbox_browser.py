"""The sandboxed browser: a real Chromium inside a real hardened sandbox container (no network,
no capabilities, uid 1000), its CDP pipe carried by an attached `docker exec`, attached to the
relay as the session's extension and driven by Playwright through the relay — by itself, and
as the browser tools' browser with `INSTANCE_AI_BROWSER=sandbox`."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from browser_relay.driver import Drivers
from browser_relay.headless import HeadlessBrowsers
from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSessions, sandbox_key
from sandbox.image.rootfs import WORKSPACE
from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider
from server.settings import Settings
from tests.agent_fixtures import Chat, last_tool_results, model, with_model
from tests.browser_fixtures import serve_pages
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.sandbox_fixtures import output_of
from tests.tool_client import ToolClient, tabs_opened_by

__all__ = ["model"]  # a fixture, shared

FORM = """<html><head><title>Sandbox form</title></head><body>
<label>Name <input id="who"></label>
<button id="greet" onclick="out.textContent = 'Hi ' + who.value">Greet</button>
<p id="out"></p>
<input id="file" type="file" onchange="this.files[0].text().then(t => picked.textContent = t)">
<p id="picked"></p>
<button id="popup" onclick="window.open('other.html')">Open</button>
</body></html>"""
OTHER = "<html><head><title>Other</title></head><body>another page</body></html>"
OUTSIDE = "<html><head><title>Outside</title></head><body>from the host</body></html>"


@pytest.fixture
async def outside() -> AsyncIterator[str]:
    """A site on the host's loopback: outside the sandbox."""
    async with serve_pages({"/": OUTSIDE}) as base:
        yield base


async def test_a_chromium_in_the_sandbox_is_driven_through_the_relay(
    provider: SandboxProvider, outside: str
) -> None:
    manager = SandboxManager(provider)  # no egress proxy: no way out at all
    relay = await RelayServer(BrowserSessions()).start()
    now = [0.0]
    headless = HeadlessBrowsers(relay, idle_seconds=60, clock=lambda: now[0])
    drivers = Drivers()
    try:
        await manager.write_file("t1", "page.html", FORM.encode())
        session = await headless.ensure(sandbox_key("t1"), lambda: manager.open_browser("t1"))
        assert session.relay.state == "connected"
        driver = await drivers.driver(session.id, *relay.cdp_endpoint(session))
        page = driver.page(None)
        await page.goto(f"file://{WORKSPACE}/page.html")
        await page.fill("#who", "Grace")
        await page.click("#greet")
        assert await page.text_content("#out") == "Hi Grace"
        # The browser runs in the container, as the sandbox user.
        container = await manager.acquire("t1")
        ps = output_of(manager.engine, container, "ps", "-o", "user=,args=", "-C", "chromium")
        assert "/usr/lib/chromium/chromium" in ps and ps.split()[0] in ("user", "1000")
        # Nothing beyond the sandbox: the host's own loopback site is out of reach.
        with pytest.raises(Exception, match="ERR_"):
            await page.goto(outside)
        # Asking again while it runs reuses it.
        again = await headless.ensure(sandbox_key("t1"), lambda: manager.open_browser("t1"))
        assert again is session and headless.running(sandbox_key("t1"))
        # Unused for its idle time, it is stopped, and Chromium ends (the pipe's EOF).
        now[0] += 59
        assert await headless.stop_idle() == []
        now[0] += 1
        assert await headless.stop_idle() == [sandbox_key("t1")]
        assert not headless.running(sandbox_key("t1"))
        assert not await _chromium_running(provider, "t1")
    finally:
        await drivers.close()
        await headless.close()
        await relay.close()
        await manager.close()


async def _chromium_running(provider: SandboxProvider, thread: str) -> bool:
    container = provider.container(thread)
    for _ in range(50):
        if provider.engine.exec(
            container.id, ["pgrep", "-f", "/usr/lib/chromium"], workdir="/"
        ).exit_code:
            return False
        await asyncio.sleep(0.1)
    return True


async def test_the_browser_tools_drive_the_sandboxed_browser(
    make_docker_settings: Callable[..., Settings], outside: str
) -> None:
    port = outside.rsplit(":", 1)[1]
    settings = make_docker_settings(browser="sandbox", web_fetch_allow_hosts=[f"127.0.0.1:{port}"])
    async with serving(settings) as (app, channel):
        await app.parts.events.append("sbx", "thread-title-updated", {"title": "test"})
        tools = ToolClient(channel, "sbx")
        await tools.call("workspace_write_file", path="site/form.html", content=FORM)
        await tools.call("workspace_write_file", path="site/other.html", content=OTHER)
        await tools.call("workspace_write_file", path="notes.txt", content="from the workspace")

        # Two first calls at once share one browser and one connection to it.
        both = await asyncio.gather(*(tools.call("browser_tab_list") for _ in range(2)))
        assert [len(listed["tabs"]) for listed in both] == [1, 1]

        page = await tools.call("browser_navigate", url=f"file://{WORKSPACE}/site/form.html")
        assert page["title"] == "Sandbox form"  # no connect card: nobody has to connect
        tree = (await tools.call("browser_snapshot"))["snapshot"]
        ref = next(
            line.split("[ref=")[1].split("]")[0] for line in tree.splitlines() if "Greet" in line
        )
        await tools.call("browser_type", element={"selector": "#who"}, text="Ada")
        await tools.call("browser_click", element={"ref": ref})
        said = await tools.call("browser_evaluate", script="out.textContent")
        assert said["result"] == "Hi Ada"

        # Uploads come from the workspace.
        await tools.call("browser_upload", element={"selector": "#file"}, files=["notes.txt"])
        await tools.call("browser_wait", text="from the workspace", timeoutMs=5000)
        escape = await tools.refused(
            "browser_upload", element={"selector": "#file"}, files=["../../../etc/passwd"]
        )
        assert escape.code() is grpc.StatusCode.PERMISSION_DENIED
        missing = await tools.refused(
            "browser_upload", element={"selector": "#file"}, files=["nope.txt"]
        )
        assert missing.code() is grpc.StatusCode.NOT_FOUND

        shot = base64.b64decode((await tools.call("browser_screenshot"))["data"])
        assert shot.startswith(b"\x89PNG")
        assert base64.b64decode((await tools.call("browser_pdf"))["data"]).startswith(b"%PDF")

        new_tabs = await tabs_opened_by(tools, element={"selector": "#popup"})
        assert new_tabs and new_tabs[0]["url"].endswith("/site/other.html")

        # The outside only through the thread's egress: refused until the host is approved.
        refused = await tools.call("browser_navigate", url=outside)
        assert refused["title"] != "Outside"
        said = (await tools.call("browser_content"))["content"]
        assert "not approved for this thread" in said
        await app.parts.hitl.allow_domain("sbx", "127.0.0.1")
        reached = await tools.call("browser_navigate", url=outside)
        assert reached["title"] == "Outside"

        # A browser that dies is started afresh on the next call.
        manager = app.parts.sandboxes.manager
        assert isinstance(manager, SandboxManager)
        container = manager.provider.container("sbx")
        output_of(manager.engine, container, "pkill", "-f", "/usr/lib/chromium")
        for _ in range(100):
            if not app.parts.headless.running(sandbox_key("sbx")):
                break
            await asyncio.sleep(0.05)
        back = await tools.call("browser_navigate", url=f"file://{WORKSPACE}/site/other.html")
        assert back["title"] == "Other"
        assert [t["title"] for t in (await tools.call("browser_tab_list"))["tabs"]] == ["Other"]

        # Deleting the thread ends its browser, its session and its sandbox.
        session_id = app.parts.relay.sessions.session(sandbox_key("sbx")).id
        await app.parts.threads.delete("sbx")
        assert not app.parts.headless.running(sandbox_key("sbx"))
        assert app.parts.relay.sessions.get(session_id) is None
        assert manager.engine.inspect(container.id) is None


async def test_the_agent_is_told_it_drives_the_sandboxed_browser(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    seen: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> Turn:
        results = last_tool_results(request)
        seen.extend(results)
        return text("Done.") if results else tool("browser_tab_list", {})

    model.responder = answer
    async with serving(make_docker_settings(browser="sandbox", **with_model(model))) as (
        _app,
        channel,
    ):
        chat = Chat(channel)
        run_id = await chat.send("told", "Which tabs are open?")
        events = await chat.finished("told", run_id, within=120)
    system = json.dumps(model.requests[0]["system"])
    assert "headless Chromium inside this thread's sandbox" in system
    assert "extension they connected" not in system
    # No connect card: the sandbox's browser is just there.
    assert "confirmation-request" not in [e["type"] for e in events]
    assert not seen[-1].get("is_error") and json.loads(seen[-1]["content"])["tabs"]
