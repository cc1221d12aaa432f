"""Differential tests of our assistant against n8n's own, on one real n8n 2.41.1
(tests/test_n8n_bridge_reference.py, tests/test_differential.py): the scripted model both
assistants talk to, the editor's side of a conversation over HTTP, and the readings of a
run (its cards, its gating decisions, what the editor shows of it).

Two assistants sit behind the same editor API: n8n's own at n8n's URL (its agent on the
Messages-API stand-in, its sandbox ours through the sandbox API) and ours behind
`instance-ai n8n-bridge`. A `Responder` answers every model request with the next step of
the script of whichever assistant asks, known by the tools it offers."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from instance_ai_cli import n8n_local
from tests.fake_model import FakeMessagesAPI, Turn, text, thinking, use
from tests.n8n_bridge_fixtures import SHAPE, START

API = "/rest/instance-ai"
APPROVE = {"kind": "approval", "approved": True}
DENY = {"kind": "approval", "approved": False}
RUN_TIMEOUT_S = 420.0
# Types the editor reads without a cursor (never an `id:` line); n8n's contract has the same
# set as INSTANCE_AI_EPHEMERAL_EVENT_TYPES, checked against the installed one.
EPHEMERAL = {"text-delta", "reasoning-delta", "status", "filesystem-request"}
COLLAPSED = {"text-delta", "reasoning-delta"}
# Tools that only find or load other tools: never a step of a script.
LOADERS = {"load_tool", "search_tools"}
# The phase a model request belongs to: the follow-up run it answers, else the main one.
_FOLLOW_UP = re.compile(r'<planned-task-follow-up type="([a-z-]+)"')
Event = dict[str, Any]


# -- the script ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Step:
    tool: str
    arguments: dict[str, Any]
    say: str = ""


@dataclass(frozen=True, kw_only=True)
class Phase:
    """A run's script: its tool calls in order, then its closing text."""

    steps: tuple[Step, ...] = ()
    closing: str = "Done."


@dataclass(frozen=True, kw_only=True)
class Script:
    """One assistant's side of a conversation: the main run's script and those of the
    follow-up runs (by their `<planned-task-follow-up type=...>`)."""

    name: str  # "reference" or "bridge"
    marker: str  # a tool only this assistant offers its model
    main: Phase
    follow_ups: dict[str, Phase] = field(default_factory=dict)

    def phase(self, name: str) -> Phase | None:
        return self.main if name == "main" else self.follow_ups.get(name)


@dataclass
class Responder:
    """The model's side of the conversation, for both assistants: the next step of the script
    of whichever assistant asks (known by the tools offered), in the phase its run is in
    (see `turn_state`); a title for anything without tools. A step whose tool n8n defers is
    loaded first (`load_tool`). Every turn starts with a thinking block (both assistants ask
    with extended thinking on, and the Messages API wants a tool-calling turn to start with
    one)."""

    scripts: tuple[Script, ...]
    title: str = "Untitled"
    asked: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __call__(self, request: dict[str, Any]) -> Turn:
        tools = {t.get("name"): t for t in request.get("tools", [])}
        script = next((s for s in self.scripts if s.marker in tools), None)
        if script is None:
            self.asked.append({"assistant": None, "tools": len(tools), "answered": "title"})
            return text(self.title)  # n8n's title (and any other side question)
        phase_name, opener, index = turn_state(request["messages"])
        phase = script.phase(phase_name)
        record: dict[str, Any] = {
            "assistant": script.name,
            "phase": phase_name,
            "tools": len(tools),
            "thinking": bool(request.get("thinking")),
        }
        if phase_name != "main":
            record["opener"] = opener
        self.asked.append(record)
        if phase is None:
            self.problems.append(f"{script.name}: no script for the {phase_name} phase")
            record["answered"] = "text"
            return Turn(blocks=[thinking("Nothing scripted."), *text("Nothing to do.").blocks])
        if index >= len(phase.steps):
            record["answered"] = "text"
            return Turn(blocks=[thinking("That is all."), *text(phase.closing).blocks])
        step = phase.steps[index]
        if step.tool not in tools and "load_tool" in tools:
            record["answered"] = "load_tool"
            load = {"toolName": step.tool}
            return Turn(blocks=[thinking(f"Load {step.tool}."), use("load_tool", load)])
        record["answered"] = step.tool
        if step.tool not in tools:
            self.problems.append(f"{script.name}: {step.tool} is not offered")
            return Turn(blocks=[thinking("Missing tool."), *text("I cannot do that.").blocks])
        problem = argument_problem(tools[step.tool], step)
        if problem:
            self.problems.append(f"{script.name}: {problem}")
        blocks = [thinking(f"Next: {step.tool}.")]
        if step.say:
            blocks += text(step.say).blocks
        return Turn(blocks=[*blocks, use(step.tool, step.arguments)])


def turn_state(messages: list[dict[str, Any]]) -> tuple[str, str, int]:
    """The phase of a request (the follow-up its run answers, else "main"), the text of the
    message that opened the phase (the last follow-up message, else the first message: a
    nudge an assistant adds within a run opens nothing), and how many scripted steps the
    phase has taken since."""
    start = 0
    for index, message in enumerate(messages):
        if message.get("role") == "user" and _FOLLOW_UP.search(_text(message)):
            start = index
    opener = _text(messages[start]) if messages else ""
    found = _FOLLOW_UP.search(opener)
    taken = sum(
        1
        for message in messages[start:]
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_use" and block.get("name") not in LOADERS
    )
    return (found.group(1) if found else "main"), opener, taken


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content or [] if b.get("type") == "text")


def argument_problem(tool: dict[str, Any], step: Step) -> str | None:
    """Whether the step's arguments are ones the offered tool's schema takes (its top-level
    properties; n8n's grouped tools: one of its actions)."""
    properties = tool.get("input_schema", {}).get("properties", {})
    unknown = set(step.arguments) - set(properties)
    if unknown:
        return f"{step.tool} takes no {sorted(unknown)}: {sorted(properties)}"
    action = step.arguments.get("action")
    if action is not None and action not in json.dumps(properties.get("action")):
        return f"{step.tool} has no action {action!r}"
    return None


@asynccontextmanager
async def scripted_model(responder: Responder | None = None) -> AsyncIterator[FakeMessagesAPI]:
    model = FakeMessagesAPI()
    model.responder = responder
    await model.start()
    try:
        yield model
    finally:
        await model.close()


def n8n_source(name: str, *, slug: str = "order-intake") -> str:
    """The two-node workflow (a manual trigger into a Set node) in n8n's TypeScript SDK
    (n8n's build-workflow compiles it in the sandbox)."""
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

export default workflow('{slug}', '{name}').add(start).to(shape);
"""


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
    # Each card's answer: the body sent, and the status and body of `POST /confirm`.
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    confirmed: list[tuple[int, Any]] = field(default_factory=list)
    title: str | None = None

    @property
    def events(self) -> list[Event]:
        return [f.data for f in self.frames if f.name is None]

    def of_type(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.get("type") == kind]

    def said(self) -> str:
        return "".join(e["payload"]["text"] for e in self.of_type("text-delta"))


# What the person answers a card (its payload) with; it may look at n8n first.
Answer = Callable[[dict[str, Any], Transcript], Awaitable[dict[str, Any]]]
# Whether the conversation is over once this frame arrived.
Done = Callable[[Transcript, Frame], bool]


async def approve_all(card: dict[str, Any], transcript: Transcript) -> dict[str, Any]:
    """Allow once, to every card."""
    return APPROVE


def first_run_finished(transcript: Transcript, frame: Frame) -> bool:
    return frame.type == "run-finish"


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


async def converse(
    editor: httpx.AsyncClient,
    name: str,
    message: str,
    *,
    answer: Answer = approve_all,
    done: Done = first_run_finished,
    timeout_s: float = RUN_TIMEOUT_S,
) -> Transcript:
    """The conversation as n8n's editor has it: a thread in the personal project, its event
    stream (an EventSource: no browser-id header), the message, each card answered by
    `answer`, until `done` says it is over."""
    project = (await editor.get("/rest/projects/personal")).json()["data"]["id"]
    transcript = Transcript(name, str(uuid.uuid4()))
    ensure = {"threadId": transcript.thread_id, "projectId": project, "source": "assistant_page"}
    (await editor.post(f"{API}/threads", json=ensure)).raise_for_status()
    opened = editor.build_request(
        "GET", f"{API}/events/{transcript.thread_id}", timeout=httpx.Timeout(60, read=180)
    )
    del opened.headers["browser-id"]
    stream = await editor.send(opened, stream=True)
    try:
        assert stream.status_code == 200, await stream.aread()
        sent = await editor.post(f"{API}/chat/{transcript.thread_id}", json={"message": message})
        sent.raise_for_status()
        async with asyncio.timeout(timeout_s):
            async for frame in sse_frames(stream):
                transcript.frames.append(frame)
                if frame.type == "confirmation-request":
                    card = frame.data["payload"]
                    body = await answer(card, transcript)
                    transcript.answers[card["requestId"]] = body
                    confirmed = await editor.post(f"{API}/confirm/{card['requestId']}", json=body)
                    transcript.confirmed.append((confirmed.status_code, confirmed.json()))
                if done(transcript, frame):
                    return transcript
    finally:
        await stream.aclose()
    raise AssertionError(f"{name}: the stream ended before the conversation did")


async def thread_title(editor: httpx.AsyncClient, thread_id: str) -> str | None:
    found = await editor.get(f"{API}/threads/{thread_id}")
    found.raise_for_status()
    title: str | None = found.json()["data"]["thread"].get("title")
    return title


async def n8n_permissions(editor: httpx.AsyncClient) -> dict[str, str]:
    """The permissions n8n's own assistant runs with (its admin settings)."""
    found = await editor.get(f"{API}/settings")
    found.raise_for_status()
    permissions: dict[str, str] = found.json()["data"]["permissions"]
    return permissions


# -- reading a run ------------------------------------------------------------------------


def type_sequence(transcript: Transcript) -> list[str]:
    """The frames' types, `status` dropped, consecutive deltas of one kind collapsed."""
    sequence: list[str] = []
    for frame in transcript.frames:
        kind = frame.type
        if kind == "status" or (kind in COLLAPSED and sequence and sequence[-1] == kind):
            continue
        sequence.append(kind)
    return sequence


def card_payloads(transcript: Transcript) -> list[dict[str, Any]]:
    return [e["payload"] for e in transcript.of_type("confirmation-request")]


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
        for p in card_payloads(transcript)
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
        if key in reference and reference[key] != ours.get(key):
            lines += [f"{key}:", f"  reference: {reference[key]}", f"  bridge:    {ours[key]}"]
    for key, value in reference.get("framing", {}).items():
        if value != ours["framing"][key]:
            lines.append(f"{key}: reference {value!r} / bridge {ours['framing'][key]!r}")
    return "\n".join(lines)
