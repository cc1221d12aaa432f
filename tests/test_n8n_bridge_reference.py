"""A differential test of the bridge: one real n8n 2.41.1, two assistants behind one editor API.

The reference is n8n's own assistant (`/rest/instance-ai/*` at n8n's URL: n8n's agent on the
Messages-API stand-in, its sandbox ours through the sandbox API); the other is our service
behind the bridge (the same paths at the bridge's URL, the same n8n as its instance, the same
stand-in model). One scripted conversation — a streamed text, a workflow build, a data table
that needs approval, a closing text — runs through both over HTTP, as n8n's editor drives it.

What must be equal is asserted (the run completes, one approval card for the table and the
run goes on after it, the workflow and the table land in n8n, our events are all in n8n's event
contract, `id:` lines on durable events only); last, what n8n's editor shows of each stream
(its own reducer) must read the same, a known bridge bug for now (an expected failure). The
rest is written down, both sequences and both cards, to docs/n8n-reference-comparison.json,
which docs/n8n-reference.md's table of differences is checked against."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from instance_ai_cli import n8n_local
from server.settings import Settings
from tests.agent_fixtures import with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, thinking, use
from tests.n8n_bridge_fixtures import SHAPE, START, bridge, order_intake
from tests.sandbox_api_fixtures import SandboxApiServer, n8n_with_its_assistant, sandbox_api

__all__ = ["sandbox_api"]

COMPARISON = Path(__file__).resolve().parent.parent / "docs" / "n8n-reference-comparison.json"
ASK = "Build me an order intake workflow and a table for the orders."
OPENING = "Planning the order intake: a workflow first, then a table for the orders."
CLOSING = "All done: Order intake is built and the orders table exists."
TITLE = "Order intake"
RUN_TIMEOUT_S = 420.0
THINKING_BUDGET = 1024
APPROVE = {"kind": "approval", "approved": True}
API = "/rest/instance-ai"
# Types the editor reads without a cursor (never an `id:` line); n8n's contract has the same
# set as INSTANCE_AI_EPHEMERAL_EVENT_TYPES, checked below against the installed one.
EPHEMERAL = {"text-delta", "reasoning-delta", "status", "filesystem-request"}
COLLAPSED = {"text-delta", "reasoning-delta"}
Event = dict[str, Any]


# -- the script ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Step:
    tool: str
    arguments: dict[str, Any]
    say: str = ""


@dataclass(frozen=True, kw_only=True)
class Assistant:
    """One side of the comparison: its tools for the script, and what it should make."""

    name: str
    marker: str  # a tool only this assistant offers its model
    workflow: str
    table: str
    steps: tuple[Step, ...]


def _n8n_source(name: str) -> str:
    """The workflow in n8n's TypeScript SDK (n8n's build-workflow compiles it in the sandbox)."""
    return f"""import {{ workflow, node, trigger }} from '@n8n/workflow-sdk';

const start = trigger({{
  type: '{START["type"]}',
  version: {START["typeVersion"]},
  config: {{ name: '{START["name"]}', position: [0, 0] }},
}});
const shape = node({{
  type: '{SHAPE["type"]}',
  version: {SHAPE["typeVersion"]},
  config: {{
    name: '{SHAPE["name"]}',
    position: [220, 0],
    parameters: {{ mode: 'manual', assignments: {{ assignments: [] }} }},
  }},
}});

export default workflow('order-intake', '{name}').add(start).to(shape);
"""


COLUMNS = [{"name": "total", "type": "number"}]


def reference_assistant() -> Assistant:
    workflow, table, path = "Order intake (reference)", "orders_reference", "src/orders.ts"
    return Assistant(
        name="reference",
        marker="data-tables",
        workflow=workflow,
        table=table,
        steps=(
            Step(
                tool="build-workflow",
                arguments={"filePath": path, "sourceCode": _n8n_source(workflow), "name": workflow},
                say=OPENING,
            ),
            Step(
                tool="data-tables",
                arguments={"action": "create", "name": table, "columns": COLUMNS},
            ),
        ),
    )


def our_assistant() -> Assistant:
    workflow, table, path = "Order intake (bridge)", "orders_bridge", "src/orders.json"
    return Assistant(
        name="bridge",
        marker="create-data-table",
        workflow=workflow,
        table=table,
        steps=(
            Step(
                tool="workspace_write_file",
                arguments={"path": path, "content": order_intake(workflow)},
                say=OPENING,
            ),
            Step(tool="build-workflow", arguments={"filePath": path}),
            Step(tool="create-data-table", arguments={"name": table, "columns": COLUMNS}),
        ),
    )


@dataclass
class Responder:
    """The model's side of the conversation, for both assistants: the next step of the script
    of whichever assistant asks (known by the tools offered), a title for anything else.
    Every turn starts with a thinking block (both assistants ask with extended thinking on,
    and the Messages API wants a tool-calling turn to start with one)."""

    assistants: tuple[Assistant, ...]
    asked: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: dict[str, Any]) -> Turn:
        tools = {t.get("name"): t for t in request.get("tools", [])}
        assistant = next((a for a in self.assistants if a.marker in tools), None)
        step = _next_step(assistant, request["messages"]) if assistant else None
        self.asked.append(
            {
                "assistant": assistant.name if assistant else None,
                "tools": len(tools),
                "thinking": bool(request.get("thinking")),
                "answered": step.tool if step else ("text" if assistant else "title"),
            }
        )
        if assistant is None:
            return text(TITLE)  # n8n's title (and any other side question)
        if step is None:
            return Turn(blocks=[thinking("Both are done."), *text(CLOSING).blocks])
        _check_offered(tools, step)
        blocks = [thinking(f"Next: {step.tool}.")]
        if step.say:
            blocks += text(step.say).blocks
        return Turn(blocks=[*blocks, use(step.tool, step.arguments)])


def _next_step(assistant: Assistant, messages: list[dict[str, Any]]) -> Step | None:
    used = {
        block.get("name")
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    }
    return next((s for s in assistant.steps if s.tool not in used), None)


def _check_offered(tools: dict[str, dict[str, Any]], step: Step) -> None:
    """The step's arguments are the ones the offered tool's schema takes."""
    schema = tools[step.tool].get("input_schema", {})
    properties = schema.get("properties", {})
    unknown = set(step.arguments) - set(properties)
    assert not unknown, f"{step.tool} takes no {sorted(unknown)}: {sorted(properties)}"
    if "action" in step.arguments:  # n8n's data-tables: one tool, an action each
        assert step.arguments["action"] in json.dumps(properties["action"]), properties["action"]


# -- the editor's side, over HTTP ---------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """One server-sent event: its `id:` line, its `event:` name, its data."""

    event_id: str | None
    name: str | None
    data: Event

    @property
    def type(self) -> str:
        return self.name or str(self.data.get("type"))


@dataclass
class Transcript:
    assistant: str
    thread_id: str
    frames: list[Frame] = field(default_factory=list)
    # Each card's answer: the status and body of `POST /confirm/<requestId>`.
    confirmed: list[tuple[int, Any]] = field(default_factory=list)
    title: str | None = None

    @property
    def events(self) -> list[Event]:
        return [f.data for f in self.frames if f.name is None]

    def of_type(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.get("type") == kind]


async def sse_frames(response: httpx.Response) -> AsyncIterator[Frame]:
    """The response's server-sent events, as an EventSource parses them."""
    fields: dict[str, list[str]] = {}
    async for line in response.aiter_lines():
        if not line:
            if "data" in fields:
                ids, names = fields.get("id"), fields.get("event")
                data = json.loads("\n".join(fields["data"]))
                yield Frame(ids[-1] if ids else None, names[-1] if names else None, data)
            fields = {}
        elif not line.startswith(":"):  # `: ping` comments
            key, _, value = line.partition(":")
            fields.setdefault(key, []).append(value.removeprefix(" "))


@asynccontextmanager
async def editor_session(url: str, n8n: n8n_local.LocalN8n) -> AsyncIterator[httpx.AsyncClient]:
    """The owner signed in at `url`, as n8n's editor is: a session cookie, and the browser id
    its fetch calls send."""
    headers = {"browser-id": str(uuid.uuid4())}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as editor:
        login = {"emailOrLdapLoginId": n8n.owner_email, "password": n8n.owner_password}
        (await editor.post("/rest/login", json=login)).raise_for_status()
        yield editor


async def converse(editor: httpx.AsyncClient, name: str) -> Transcript:
    """The conversation as n8n's editor has it: a thread in the personal project, its event
    stream (an EventSource: no browser-id header), the message, every card approved with
    "Allow once", until the run finishes."""
    project = (await editor.get("/rest/projects/personal")).json()["data"]["id"]
    transcript = Transcript(name, str(uuid.uuid4()))
    thread = f"{API}/threads"
    ensure = {"threadId": transcript.thread_id, "projectId": project, "source": "assistant_page"}
    (await editor.post(thread, json=ensure)).raise_for_status()
    opened = editor.build_request(
        "GET", f"{API}/events/{transcript.thread_id}", timeout=httpx.Timeout(60, read=120)
    )
    del opened.headers["browser-id"]
    stream = await editor.send(opened, stream=True)
    try:
        assert stream.status_code == 200, await stream.aread()
        sent = await editor.post(f"{API}/chat/{transcript.thread_id}", json={"message": ASK})
        sent.raise_for_status()
        async with asyncio.timeout(RUN_TIMEOUT_S):
            async for frame in sse_frames(stream):
                transcript.frames.append(frame)
                if frame.type == "confirmation-request":
                    request_id = frame.data["payload"]["requestId"]
                    answer = await editor.post(f"{API}/confirm/{request_id}", json=APPROVE)
                    transcript.confirmed.append((answer.status_code, answer.json()))
                if frame.type == "run-finish":
                    return transcript
    finally:
        await stream.aclose()
    raise AssertionError(f"{name}: the stream ended before run-finish")


async def thread_title(editor: httpx.AsyncClient, thread_id: str) -> str | None:
    found = await editor.get(f"{API}/threads/{thread_id}")
    found.raise_for_status()
    title: str | None = found.json()["data"]["thread"].get("title")
    return title


# -- reading the two runs -----------------------------------------------------------------


def type_sequence(transcript: Transcript) -> list[str]:
    """The frames' types, `status` dropped, consecutive deltas of one kind collapsed."""
    sequence: list[str] = []
    for frame in transcript.frames:
        kind = frame.type
        if kind == "status" or (kind in COLLAPSED and sequence and sequence[-1] == kind):
            continue
        sequence.append(kind)
    return sequence


def cards(transcript: Transcript, i18n: dict[str, str]) -> list[dict[str, Any]]:
    """What each confirmation card carries that the editor's card reads."""
    return [
        {
            "toolName": p.get("toolName"),
            "heading": card_heading(p, i18n),
            "inputType": p.get("inputType", "(absent: approval by default)"),
            "severity": p.get("severity"),
            "message": p.get("message"),
            "approvalDetails": "approvalDetails" in p,
            "resourceName": p.get("resourceName"),
            "targetApproval": "targetApproval" in p,
            "fields": sorted(p),
        }
        for p in (e["payload"] for e in transcript.of_type("confirmation-request"))
    ]


def tool_calls(transcript: Transcript, i18n: dict[str, str]) -> list[dict[str, Any]]:
    """Each tool call: the label n8n's editor gives it (its i18n, by name and action) and
    the keys of its result."""
    results = {e["payload"]["toolCallId"]: e["payload"] for e in transcript.of_type("tool-result")}
    calls = []
    for event in transcript.of_type("tool-call"):
        payload = event["payload"]
        name, args = payload["toolName"], payload.get("args") or {}
        result = results.get(payload["toolCallId"], {}).get("result")
        calls.append(
            {
                "toolName": name,
                "action": args.get("action"),
                "label": i18n.get(_tool_key(name, args)) or i18n.get(f"tools.{name}"),
                "args": sorted(args),
                "result": sorted(result) if isinstance(result, dict) else result,
            }
        )
    return calls


def framing(transcript: Transcript) -> dict[str, Any]:
    """How text and reasoning arrive, and what every event carries."""
    events = transcript.events
    return {
        "text-delta pieces": [d["payload"]["text"] for d in transcript.of_type("text-delta")],
        "text-block": [d["payload"]["text"] for d in transcript.of_type("text-block")],
        "reasoning-delta frames": len(transcript.of_type("reasoning-delta")),
        "status": [e["payload"]["message"] for e in transcript.of_type("status")],
        "event keys": sorted({k for e in events for k in e}),
        "agentIds": sorted({str(e.get("agentId")) for e in events}),
        "runIds": len({e.get("runId") for e in events}),
        "responseIds": len({e["responseId"] for e in events if "responseId" in e}),
        "thread-title-updated": [
            e["payload"]["title"] for e in transcript.of_type("thread-title-updated")
        ],
        "thread title": transcript.title,
        "types with id lines": sorted({f.type for f in transcript.frames if f.event_id}),
        "types without": sorted({f.type for f in transcript.frames if not f.event_id}),
    }


def summary(transcript: Transcript, i18n: dict[str, str]) -> dict[str, Any]:
    finish = transcript.of_type("run-finish")
    return {
        "thread": transcript.thread_id,
        "sequence": type_sequence(transcript),
        "cards": cards(transcript, i18n),
        "confirm answers": transcript.confirmed,
        "tool calls": tool_calls(transcript, i18n),
        "run-finish": finish[-1]["payload"] if finish else None,
        "framing": framing(transcript),
    }


def editor_i18n(installed: n8n_local.N8nInstall) -> dict[str, str]:
    """n8n's editor's English strings of the assistant (`instanceAi.<key>`, by `<key>`)."""
    assets = installed.n8n.parents[1].parent / "n8n-editor-ui" / "dist" / "assets"
    prefix = '"instanceAi.'
    for bundle in sorted(assets.glob("src-*.js")):
        source = bundle.read_text(errors="replace")
        if prefix + 'tools.build-workflow"' not in source:
            continue
        strings: dict[str, str] = {}
        for chunk in source.split(prefix)[1:]:
            key, _, rest = chunk.partition('":')
            if rest and rest[0] in "`\"'":
                strings[key] = rest[1:].split(rest[0], 1)[0]
        return strings
    return {}


def _tool_key(name: str, args: Any) -> str:
    """The editor's i18n key of a call: by tool name, and action where the tool has one."""
    action = args.get("action") if isinstance(args, dict) else None
    return f"tools.{name}" + (f".{action}" if isinstance(action, str) else "")


def card_heading(card: dict[str, Any], i18n: dict[str, str]) -> str | None:
    """The heading n8n's editor gives an approval card: a sentence where it has the verb for
    the tool (and the resource's name), else the tool's label."""
    key, name = _tool_key(card["toolName"], card.get("args")), card.get("resourceName")
    if name and (verb := i18n.get(f"{key}.imperativeWithResource")):
        return i18n["confirmation.resourcePrompt"].format(action=verb, name=name)
    if verb := i18n.get(f"{key}.imperative"):
        return i18n["confirmation.allowPrompt"].format(action=verb)
    return i18n.get(key) or i18n.get(f"tools.{card['toolName']}")


# Run by the reference's own Node with the reference's own @n8n/api-types: the event contract
# (its types, the ephemeral ones, what it refuses) and the editor's fold of each stream (the
# reducer n8n's editor feeds every event it reads to), as the root agent's view.
_N8N_SCRIPT = """
const api = require(process.argv[1]);
let input = '';
process.stdin.on('data', (c) => (input += c));
process.stdin.on('end', () => {
  const streams = JSON.parse(input);
  const invalid = [];
  streams.forEach((events, stream) => events.forEach((event, index) => {
    const checked = api.instanceAiEventSchema.safeParse(event);
    const issues = checked.success ? [] : checked.error.issues;
    if (issues.length) invalid.push({ stream, index, type: event.type, issues });
  }));
  const views = streams.map((events) => {
    let state = api.createInitialState();
    for (const event of events) state = api.reduceEvent(state, event);
    const root = api.toAgentTree(state);
    return {
      textContent: root.textContent,
      reasoning: root.reasoning,
      timeline: root.timeline.map((t) => t.type === 'tool-call'
        ? `tool-call ${state.toolCallsById[t.toolCallId]?.toolName}` : t.type),
      toolCalls: root.toolCalls.map((c) => ({ toolName: c.toolName, isLoading: c.isLoading,
        confirmed: c.confirmation !== undefined })),
      status: root.status,
    };
  });
  process.stdout.write(JSON.stringify({
    types: api.instanceAiEventTypeSchema.options,
    ephemeral: [...api.INSTANCE_AI_EPHEMERAL_EVENT_TYPES],
    invalid,
    views,
  }));
});
"""


def as_n8n_reads(installed: n8n_local.N8nInstall, streams: list[list[Event]]) -> dict[str, Any]:
    """The streams read with the reference's own code (see _N8N_SCRIPT)."""
    api_types = installed.n8n.parents[1].parent / "@n8n" / "api-types"
    result = subprocess.run(
        [str(installed.node), "-e", _N8N_SCRIPT, str(api_types)],
        input=json.dumps(streams),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    read: dict[str, Any] = json.loads(result.stdout)
    return read


async def in_n8n(n8n: n8n_local.LocalN8n) -> tuple[set[str], set[str]]:
    """The workflows' and the data tables' names, from n8n's public API."""
    headers = {"X-N8N-API-KEY": n8n.api_key}
    async with httpx.AsyncClient(base_url=f"{n8n.url}/api/v1", headers=headers) as public:
        workflows = (await public.get("/workflows")).json()["data"]
        tables = (await public.get("/data-tables")).json()["data"]
    return {w["name"] for w in workflows}, {t["name"] for t in tables}


def short_diff(reference: dict[str, Any], ours: dict[str, Any]) -> str:
    lines = []
    for key in ("sequence", "cards", "tool calls", "run-finish", "editor view"):
        if reference[key] != ours[key]:
            lines += [f"{key}:", f"  reference: {reference[key]}", f"  bridge:    {ours[key]}"]
    for key, value in reference["framing"].items():
        if value != ours["framing"][key]:
            lines.append(f"{key}: reference {value!r} / bridge {ours['framing'][key]!r}")
    return "\n".join(lines)


# -- the assertions, per assistant ---------------------------------------------------------


def assert_completed_with_one_card(transcript: Transcript, assistant: Assistant) -> None:
    name = assistant.name
    finish = transcript.of_type("run-finish")
    assert finish and finish[-1]["payload"]["status"] == "completed", (name, finish)
    found = transcript.of_type("confirmation-request")
    assert len(found) == 1, (name, found)
    card = found[0]["payload"]
    assert card["toolName"] == assistant.steps[-1].tool, (name, card)
    assert card.get("inputType", "approval") == "approval", (name, card)
    assert [status for status, _ in transcript.confirmed] == [200], (name, transcript.confirmed)
    assert transcript.confirmed[0][1]["data"]["ok"] is True, (name, transcript.confirmed)
    # After the approval: the table's tool result, then the closing text.
    events = transcript.events
    after = events[events.index(found[0]) + 1 :]
    results = [
        e
        for e in after
        if e["type"] == "tool-result" and e["payload"]["toolCallId"] == card["toolCallId"]
    ]
    assert results and "table" in results[0]["payload"]["result"], (name, results)
    built = [c for c in transcript.of_type("tool-result") if "workflowId" in c["payload"]["result"]]
    assert built and built[0]["payload"]["result"]["success"] is True, (name, built)
    said = "".join(e["payload"]["text"] for e in after if e["type"] == "text-delta")
    assert CLOSING in said, (name, said)


def assert_ids_on_durable_events_only(transcript: Transcript, live_only: set[str]) -> None:
    """`id:` on every durable event and on nothing else; `live_only`: durable types in n8n's
    contract this assistant streams without one."""
    for frame in transcript.frames:
        if frame.name is not None:  # run-sync: a named frame, no cursor
            assert frame.event_id is None, frame
        elif frame.type in EPHEMERAL | live_only:
            assert frame.event_id is None, (transcript.assistant, frame)
        else:
            assert frame.event_id is not None, (transcript.assistant, frame)


@asynccontextmanager
async def scripted_model(responder: Responder) -> AsyncIterator[FakeMessagesAPI]:
    model = FakeMessagesAPI()
    model.responder = responder
    await model.start()
    try:
        yield model
    finally:
        await model.close()


# -- the test ------------------------------------------------------------------------------


@pytest.mark.timeout(900)
async def test_n8ns_assistant_and_ours_through_the_bridge_hold_one_conversation_alike(
    sandbox_api: SandboxApiServer,
    make_docker_settings: Callable[..., Settings],
    tmp_path: Path,
) -> None:
    reference, ours = reference_assistant(), our_assistant()
    responder = Responder((reference, ours))
    installed = n8n_local.install()
    async with (
        scripted_model(responder) as model,
        n8n_with_its_assistant(installed, tmp_path / "n8n", model.url, sandbox_api) as n8n,
    ):
        # Ours thinks too, as n8n's does (n8n asks its model with extended thinking on).
        thinks = with_model(model, model_thinking_budget_tokens=THINKING_BUDGET)
        settings = make_docker_settings(
            instance="n8n", n8n_url=n8n.url, n8n_api_key=n8n.api_key, **thinks
        )
        async with (
            serving(settings) as (app, _channel),
            bridge(n8n.url, app.port) as url,
            editor_session(n8n.url, n8n) as at_n8n,
            editor_session(url, n8n) as at_bridge,
        ):
            theirs = await converse(at_n8n, reference.name)
            mine = await converse(at_bridge, ours.name)
            # n8n names its thread with the model after the run: asked once both runs are over.
            theirs.title = await thread_title(at_n8n, theirs.thread_id)
            mine.title = await thread_title(at_bridge, mine.thread_id)
        workflows, tables = await in_n8n(n8n)

    read = as_n8n_reads(installed, [theirs.events, mine.events])
    i18n = editor_i18n(installed)
    compared: dict[str, Any] = {}
    for transcript, view in zip((theirs, mine), read["views"], strict=True):
        compared[transcript.assistant] = summary(transcript, i18n) | {"editor view": view}
    their_types, my_types = {e["type"] for e in theirs.events}, {e["type"] for e in mine.events}
    compared["contract"] = {
        "refused": read["invalid"],
        "types only the reference emitted": sorted(their_types - my_types),
        "types only the bridge emitted": sorted(my_types - their_types),
    }
    compared["model requests"] = responder.asked
    compared["in n8n"] = {"workflows": sorted(workflows), "tables": sorted(tables)}
    COMPARISON.write_text(json.dumps(compared, indent=2, ensure_ascii=False) + "\n")
    print("\n" + short_diff(compared["reference"], compared["bridge"]))

    for transcript, assistant in ((theirs, reference), (mine, ours)):
        assert_completed_with_one_card(transcript, assistant)
        assert assistant.workflow in workflows, (assistant.name, workflows)
        assert assistant.table in tables, (assistant.name, tables)
    assert set(read["ephemeral"]) == EPHEMERAL
    assert_ids_on_durable_events_only(theirs, live_only=set())
    # The service publishes tool-input-start live only (server/agent/turns.py).
    assert_ids_on_durable_events_only(mine, live_only={"tool-input-start"})
    assert my_types <= set(read["types"]), my_types - set(read["types"])
    assert not read["invalid"], read["invalid"]
    # Last, what n8n's editor makes of each stream (its own reducer): the same words, once
    # (the bridge holds back a durable block whose deltas it already streamed, as n8n never
    # streams blocks live).
    their_view, my_view = read["views"]
    assert my_view["textContent"] == their_view["textContent"]
    # The reasoning names each assistant's own tools, so only: every thought shown once.
    for view in (their_view, my_view):
        thoughts = re.findall(r"[^.]+\.", view["reasoning"])
        assert thoughts and len(thoughts) == len(set(thoughts)), view["reasoning"]
