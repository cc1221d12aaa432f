"""End to end: a real, unchanged n8n 2.41.1 started with the four variables of "Your n8n's
sandbox" (README) uses this service as its assistant's sandbox. n8n's own agent, on a scripted
model (the Messages-API stand-in), writes a workflow file in our sandbox and builds it, and
the workflow lands in that n8n."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest

from tests.fake_model import Turn, text, thinking, use
from tests.sandbox_api_fixtures import (
    STATIC_KEY,
    WITH_N8NS_ASSISTANT,
    N8nAssistant,
    SandboxApiServer,
)

pytestmark = WITH_N8NS_ASSISTANT

FILE = "src/workflows/greet.workflow.ts"
WORKFLOW_NAME = "Greeting built in an instance-ai sandbox"
SOURCE = """import { workflow, node, trigger } from '@n8n/workflow-sdk';

const start = trigger({
  type: 'n8n-nodes-base.manualTrigger',
  version: 1,
  config: { name: 'Start', position: [0, 0] },
});
const greet = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Greet',
    position: [240, 0],
    parameters: {
      assignments: {
        assignments: [{ id: 'a1', name: 'greeting', value: 'hello', type: 'string' }],
      },
    },
  },
});

export default workflow('greeting', 'NAME').add(start).to(greet);
""".replace("NAME", WORKFLOW_NAME)


def _respond(request: dict[str, Any]) -> Turn:
    """n8n's agent gets the build call once, then a closing line; anything else n8n asks of
    the model (a thread title) gets a short text."""
    tools = {t.get("name") for t in request.get("tools", [])}
    if "build-workflow" not in tools:
        return text("Greeting workflow")
    last = request["messages"][-1]
    results = [
        b for b in last.get("content", []) if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    if results:
        return text("The workflow is built and saved.")
    # n8n asks with extended thinking on: the turn that calls a tool starts with thinking.
    arguments = {"filePath": FILE, "sourceCode": SOURCE, "name": WORKFLOW_NAME}
    return Turn(blocks=[thinking("Write the file and build it."), use("build-workflow", arguments)])


@pytest.mark.timeout(600)
async def test_a_stock_n8n_builds_its_workflow_in_our_sandbox(
    sandbox_api: SandboxApiServer, n8n_assistant: N8nAssistant
) -> None:
    # The four variables of the README's "Your n8n's sandbox", n8n's assistant on the
    # scripted model (tests/sandbox_api_fixtures.py).
    n8n = n8n_assistant.n8n
    n8n_assistant.model.responder = _respond
    async with httpx.AsyncClient(base_url=n8n.url, timeout=60) as editor:
        login = {"emailOrLdapLoginId": n8n.owner_email, "password": n8n.owner_password}
        (await editor.post("/rest/login", json=login)).raise_for_status()

        settings = (await editor.get("/rest/module-settings")).json()["data"]["instance-ai"]
        assert settings["sandboxEnabled"] is True
        assert settings["workflowBuilderAvailable"] is True, settings

        project = (await editor.get("/rest/projects/personal")).json()["data"]["id"]
        thread = str(uuid.uuid4())
        ensure = {"threadId": thread, "projectId": project, "source": "assistant_page"}
        (await editor.post("/rest/instance-ai/threads", json=ensure)).raise_for_status()
        ask = {"message": "Build a workflow that greets."}
        (await editor.post(f"/rest/instance-ai/chat/{thread}", json=ask)).raise_for_status()
        events = await _events_until_finished(editor, thread)

    finish = [e for e in events if e.get("type") == "run-finish"]
    assert finish and finish[-1]["payload"]["status"] == "completed", events
    results = [e for e in events if e.get("type") == "tool-result"]
    built = next(r["payload"]["result"] for r in results if "workflowId" in r["payload"]["result"])
    assert built["success"] is True, built

    # The workflow is in n8n, as built from the file in our sandbox.
    async with httpx.AsyncClient(
        base_url=n8n.url, headers={"X-N8N-API-KEY": n8n.api_key}, timeout=30
    ) as public:
        workflow = (await public.get(f"/api/v1/workflows/{built['workflowId']}")).json()
    assert workflow["name"] == WORKFLOW_NAME
    assert sorted(n["name"] for n in workflow["nodes"]) == ["Greet", "Start"]

    # The file is in one of our sandboxes (n8n's id for the thread), with n8n's workspace.
    async with httpx.AsyncClient(
        base_url=sandbox_api.url, headers={"X-Api-Key": STATIC_KEY}, timeout=30
    ) as ours:
        found = None
        for record in (await ours.get("/sandboxes")).json():
            read = await ours.get(
                f"/sandboxes/{record['id']}/files/content",
                params={"path": f"/home/user/workspace/{FILE}"},
            )
            if read.status_code == 200:
                found = record
                assert read.text == SOURCE
        assert found is not None, "no sandbox of ours holds n8n's workflow file"
        marker = await ours.get(
            f"/sandboxes/{found['id']}/stat",
            params={"path": "/home/user/workspace/.sandbox-initialized"},
        )
        assert marker.status_code == 200


async def _events_until_finished(
    editor: httpx.AsyncClient, thread: str, timeout_s: float = 300.0
) -> list[dict[str, Any]]:
    """n8n's SSE stream of the thread, until its run finishes."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    async with editor.stream(
        "GET", f"/rest/instance-ai/events/{thread}", timeout=timeout_s
    ) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("data:"):
                event = json.loads(line[5:].strip())
                events.append(event)
                if event.get("type") == "run-finish":
                    return events
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"the run did not finish: {events}")
