"""n8n's own editor in front of our assistant: a real n8n 2.41.1 behind the bridge
(`instance-ai n8n-bridge`), the service on the Messages-API stand-in with n8n as its instance,
and the machine's Chromium driving n8n's unchanged assistant views."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, async_playwright, expect

from instance_ai_cli import n8n_local
from server.settings import Settings
from tests.agent_fixtures import model, with_model
from tests.browser_fixtures import CHROMIUM_ARGS
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool, use
from tests.n8n_bridge_fixtures import bridge, order_intake
from tests.n8n_fixtures import N8nApi, make_n8n_settings, n8n

__all__ = ["make_n8n_settings", "model", "n8n"]

# What n8n's pages may take on a loaded machine (each assertion waits up to this, no longer).
SLOW_MS = 30_000
EDITOR_LOAD_MS = 120_000
DOCS = Path(__file__).resolve().parent.parent / "docs"
SCREENSHOT = DOCS / "n8n-editor-assistant.png"
CARD_SCREENSHOT = DOCS / "n8n-editor-card.png"


def conversation() -> list[Turn]:
    """Streamed text, a checklist, a build, a gated tool (its card), the final answer."""
    plan = [
        {"id": "build", "description": "Build the order intake workflow", "status": "done"},
        {"id": "table", "description": "Create the orders table", "status": "in_progress"},
    ]
    return [
        tool("update-tasks", {"tasks": plan}, say="Planning the order intake."),
        tool("workspace_write_file", {"path": "src/orders.json", "content": order_intake()}),
        tool("build-workflow", {"filePath": "src/orders.json"}),
        Turn(
            blocks=[
                use(
                    "create-data-table",
                    {"name": "orders", "columns": [{"name": "total", "type": "number"}]},
                )
            ]
        ),
        text("All done: Order intake is built and the orders table exists."),
    ]


async def log_in(page: Page, url: str, email: str, password: str) -> None:
    """Sign in through the bridge. The page's later loads wait as long as a busy machine
    needs for n8n's editor (megabytes of scripts; seen over Playwright's 30 s default)."""
    page.set_default_navigation_timeout(EDITOR_LOAD_MS)
    await page.goto(f"{url}/signin")
    await page.fill("input[name=emailOrLdapLoginId], input[type=email]", email)
    await page.fill("input[type=password]", password)
    await page.keyboard.press("Enter")
    await page.wait_for_url(lambda u: "/signin" not in u, timeout=60_000)


async def member(n8n: n8n_local.LocalN8n) -> tuple[str, str]:
    """A second n8n user (a member), invited by the owner and signed up."""
    email, password = "member@instance-ai.local", "Member-pw-12345"
    async with httpx.AsyncClient(base_url=n8n.url, timeout=30) as owner:
        login = {"emailOrLdapLoginId": n8n.owner_email, "password": n8n.owner_password}
        (await owner.post("/rest/login", json=login)).raise_for_status()
        invited = await owner.post(
            "/rest/invitations", json=[{"email": email, "role": "global:member"}]
        )
        invited.raise_for_status()
        link = httpx.URL(invited.json()["data"][0]["user"]["inviteAcceptUrl"])
        accepted = await owner.post(
            "/rest/invitations/accept",
            json={
                "token": link.params["token"],
                "firstName": "Mem",
                "lastName": "Ber",
                "password": password,
            },
        )
        accepted.raise_for_status()
    return email, password


@pytest.mark.timeout(600)
async def test_a_person_in_n8ns_editor_talks_to_our_assistant(
    make_n8n_settings: Callable[..., Settings],
    n8n: n8n_local.LocalN8n,
    model: FakeMessagesAPI,
) -> None:
    model.script(*conversation())
    settings = make_n8n_settings(**with_model(model))
    async with (
        serving(settings) as (app, _channel),
        bridge(n8n.url, app.port) as url,
        async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(
            executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS
        )
        page = await (await browser.new_context(viewport={"width": 1400, "height": 900})).new_page()
        await log_in(page, url, n8n.owner_email, n8n.owner_password)

        # n8n's own view opens with our assistant behind it.
        await page.goto(f"{url}/assistant")
        composer = page.locator('[data-test-id="instance-ai-container"] textarea')
        await composer.fill("Build me an order intake workflow and a table for the orders.")
        await page.locator('[data-test-id="instance-ai-send-button"]').click()

        # The card replaces the composer; approving it with n8n's own button goes on.
        panel = page.locator('[data-test-id="instance-ai-confirmation-panel"]')
        await expect(panel).to_be_visible(timeout=180_000)
        # It says what will change, as n8n's own cards do.
        await expect(panel).to_contain_text(
            'Create the table with 1 column: "total"', timeout=SLOW_MS
        )
        await expect(page.locator('[data-test-id="instance-ai-panel-confirm-deny"]')).to_be_visible(
            timeout=SLOW_MS
        )
        await page.screenshot(path=str(CARD_SCREENSHOT))
        await page.locator('[data-test-id="instance-ai-panel-confirm-approve"]').click()
        await expect(panel).to_be_hidden(timeout=SLOW_MS)

        answer = page.locator('[data-test-id="instance-ai-assistant-message"]').last
        await expect(answer).to_contain_text("All done: Order intake is built", timeout=120_000)
        await expect(page.locator('[data-test-id="instance-ai-send-button"]')).to_be_visible(
            timeout=SLOW_MS
        )
        await expect(answer).to_contain_text("Planning the order intake.", timeout=SLOW_MS)
        await expect(page.locator('[data-test-id="instance-ai-user-message"]')).to_contain_text(
            "Build me an order intake workflow", timeout=SLOW_MS
        )
        # The tool calls sit in n8n's thinking block, labelled by n8n.
        await answer.locator('[data-test-id="thinking-block-header"]').first.click()
        for label in (
            "Updating tasks",
            "Writing file",
            "Generating workflow",
            "Creating data table",
        ):
            await expect(answer.get_by_role("button", name=label)).to_be_visible(timeout=SLOW_MS)
        # The built workflow opened in n8n's artifact preview; behind it, the lists panel has
        # the checklist.
        await page.get_by_role("button", name="Hide artifacts preview").click()
        await expect(page.get_by_text("To-do list")).to_be_visible(timeout=SLOW_MS)
        await expect(page.get_by_title("Create the orders table")).to_be_visible(timeout=SLOW_MS)
        await page.wait_for_timeout(1000)  # the panel's fade, for a clear picture
        await page.screenshot(path=str(SCREENSHOT), full_page=True)

        # What was built is in n8n, and opens on n8n's canvas.
        api = N8nApi(n8n)
        workflows = (await api.call("GET", "/workflows"))["data"]
        built = next(w for w in workflows if w["name"] == "Order intake")
        tables = (await api.call("GET", "/data-tables"))["data"]
        assert any(t["name"] == "orders" for t in tables)
        thread_url = page.url
        assert "/assistant/" in thread_url
        await page.goto(f"{url}/workflow/{built['id']}")
        await expect(page.locator('[data-test-id="canvas-node"]')).to_have_count(2, timeout=60_000)

        # Reloading the thread replays it from the service.
        await page.goto(thread_url)
        replayed = page.locator('[data-test-id="instance-ai-assistant-message"]').last
        await expect(replayed).to_contain_text("All done: Order intake is built", timeout=60_000)
        await expect(page.locator('[data-test-id="instance-ai-user-message"]')).to_contain_text(
            "Build me an order intake workflow", timeout=SLOW_MS
        )

        # Another n8n user sees none of it.
        email, password = await member(n8n)
        other = await (await browser.new_context()).new_page()
        await log_in(other, url, email, password)
        await other.goto(f"{url}/assistant")
        await expect(other.locator('[data-test-id="instance-ai-container"]')).to_be_visible(
            timeout=SLOW_MS
        )
        threads = await other.evaluate(
            "fetch('/rest/instance-ai/threads', {headers: {'browser-id': "
            "localStorage.getItem('n8n-browserId')}}).then(r => r.json())"
        )
        assert threads["data"]["threads"] == []
        thread_id = thread_url.rsplit("/", 1)[1]
        stolen = await other.evaluate(
            f"fetch('/rest/instance-ai/threads/{thread_id}/messages', {{headers: "
            "{'browser-id': localStorage.getItem('n8n-browserId')}}).then(r => r.status)"
        )
        assert stolen == 403
        await browser.close()


async def test_without_an_n8n_session_there_is_no_assistant(
    make_n8n_settings: Callable[..., Settings], n8n: n8n_local.LocalN8n
) -> None:
    async with (
        serving(make_n8n_settings()) as (app, _channel),
        bridge(n8n.url, app.port) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        refused = await client.get("/rest/instance-ai/threads")
        assert refused.status_code == 401
        assert refused.json() == {"status": "error", "message": "Unauthorized"}
        # Everything else is n8n's, passed through untouched.
        health = await client.get("/healthz")
        assert health.status_code == 200
        login = {"emailOrLdapLoginId": n8n.owner_email, "password": n8n.owner_password}
        assert (await client.post("/rest/login", json=login)).status_code == 200
        settings = (await client.get("/rest/module-settings")).json()["data"]["instance-ai"]
        assert settings["setupCompleted"] is True and settings["workflowBuilderAvailable"] is True
        listed = await client.get("/rest/instance-ai/threads")
        assert listed.status_code == 200 and listed.json()["data"]["threads"] == []
        bad = await client.post("/rest/instance-ai/threads", json={"source": "nowhere"})
        assert bad.status_code == 400
        foreign = await client.post(
            "/rest/instance-ai/threads",
            json={"projectId": "not-mine", "source": "assistant_page"},
        )
        assert foreign.status_code == 403
        missing = await client.get("/rest/instance-ai/threads/0000/messages")
        assert missing.status_code == 404
        off = await client.get("/rest/instance-ai/debug/runs/x")
        assert off.status_code == 404


async def sse(
    client: httpx.AsyncClient,
    thread: str,
    *,
    until: str,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> list[tuple[str | None, str]]:
    """The stream's frames as (id, data or comment) until one contains `until`."""
    frames: list[tuple[str | None, str]] = []
    async with client.stream(
        "GET", f"/rest/instance-ai/events/{thread}", headers=headers, params=params, timeout=60
    ) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        event_id: str | None = None
        async for line in stream.aiter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith(("data: ", ": ")):
                frames.append((event_id, line))
                event_id = None
                if until in line:
                    return frames
    raise AssertionError(f"the stream ended before {until!r}: {frames}")


@pytest.mark.timeout(300)
async def test_threads_and_the_event_stream_answer_as_n8ns(
    make_n8n_settings: Callable[..., Settings], n8n: n8n_local.LocalN8n, model: FakeMessagesAPI
) -> None:
    model.script(text("Hello from the service."))
    async with (
        serving(make_n8n_settings(**with_model(model))) as (app, _channel),
        bridge(n8n.url, app.port) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        login = {"emailOrLdapLoginId": n8n.owner_email, "password": n8n.owner_password}
        assert (await client.post("/rest/login", json=login)).status_code == 200
        project = (await client.get("/rest/projects/personal")).json()["data"]["id"]
        thread = str(uuid.uuid4())
        body = {"threadId": thread, "projectId": project, "source": "assistant_page"}
        opened = (await client.post("/rest/instance-ai/threads", json=body)).json()["data"]
        assert opened["created"] is True
        assert opened["thread"]["metadata"] == {"source": "assistant_page", "origin": "internal"}
        again = (await client.post("/rest/instance-ai/threads", json=body)).json()["data"]
        assert again["created"] is False
        status = (await client.get(f"/rest/instance-ai/threads/{uuid.uuid4()}/status")).json()
        assert status["data"]["hasActiveRun"] is False

        sent = await client.post(f"/rest/instance-ai/chat/{thread}", json={"message": "Hi"})
        assert sent.status_code == 200 and sent.json()["data"]["runId"]
        frames = await sse(client, thread, until='"run-finish"')
        durable = [(i, json.loads(d[6:])) for i, d in frames if d.startswith("data: ")]
        assert all(i is None for i, e in durable if e["type"] == "text-delta")
        ids = [int(i) for i, e in durable if i is not None]
        assert ids == sorted(ids) and len(ids) >= 3
        assert {"run-start", "text-block", "run-finish"} <= {e["type"] for _, e in durable}
        assert all("threadId" not in e and "id" not in e for _, e in durable)
        me = (await client.get("/rest/login")).json()["data"]["id"]
        assert {e["userId"] for _, e in durable} == {me}

        # Resumed after the browser's Last-Event-ID (before the query), then ?lastEventId=.
        last = ids[-1]
        resumed = await sse(
            client,
            thread,
            until="ping",
            headers={"Last-Event-ID": str(last - 1)},
            params={"lastEventId": "0"},
        )
        assert [int(i) for i, _ in resumed if i is not None] == [last]
        assert resumed[-1][1] == ": ping"  # nothing new: a keep-alive
        by_query = await sse(
            client, thread, until='"run-finish"', params={"lastEventId": str(last - 1)}
        )
        assert [int(i) for i, _ in by_query if i is not None] == [last]
        bad = await client.get(f"/rest/instance-ai/events/{thread}", params={"lastEventId": "x"})
        assert bad.status_code == 400

        # The history n8n's editor reloads from.
        listed = await client.get(f"/rest/instance-ai/threads/{thread}/messages")
        history = listed.json()["data"]
        assert history["threadId"] == thread and history["nextEventId"] == last + 1
        user, answer = history["messages"]
        assert (user["role"], user["content"]) == ("user", "Hi")
        assert answer["role"] == "assistant" and answer["content"] == "Hello from the service."
        assert answer["agentTree"]["status"] == "completed"

        # Renamed, found by its title, deleted.
        renamed = await client.patch(f"/rest/instance-ai/threads/{thread}", json={"title": " Hi! "})
        assert renamed.json()["data"]["thread"]["title"] == "Hi!"
        found = await client.get("/rest/instance-ai/threads/history", params={"search": "hi!"})
        assert [t["id"] for t in found.json()["data"]["threads"]] == [thread]
        bad_cursor = await client.get(
            "/rest/instance-ai/threads/history", params={"cursor": "garbage"}
        )
        assert bad_cursor.status_code == 400
        assert (await client.delete(f"/rest/instance-ai/threads/{thread}")).json() == {
            "data": {"ok": True}
        }
        gone = await client.get(f"/rest/instance-ai/threads/{thread}")
        assert gone.status_code == 404
        assert gone.json() == {"code": 404, "message": "Thread not found"}
