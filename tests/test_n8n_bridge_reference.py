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

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from server.settings import Settings
from tests.agent_fixtures import with_model
from tests.conftest import serving
from tests.differential_fixtures import (
    EPHEMERAL,
    Phase,
    Responder,
    Script,
    Step,
    Transcript,
    as_n8n_reads,
    converse,
    editor_i18n,
    editor_session,
    in_n8n,
    n8n_source,
    short_diff,
    summary,
    thread_title,
)
from tests.n8n_bridge_fixtures import bridge, order_intake
from tests.sandbox_api_fixtures import (
    WITH_N8NS_ASSISTANT,
    N8nAssistant,
)

pytestmark = WITH_N8NS_ASSISTANT

COMPARISON = Path(__file__).resolve().parent.parent / "docs" / "n8n-reference-comparison.json"
ASK = "Build me an order intake workflow and a table for the orders."
OPENING = "Planning the order intake: a workflow first, then a table for the orders."
CLOSING = "All done: Order intake is built and the orders table exists."
TITLE = "Order intake"
THINKING_BUDGET = 1024
COLUMNS = [{"name": "total", "type": "number"}]


@dataclass(frozen=True, kw_only=True)
class Assistant:
    """One side of the comparison: its script, and what it should make."""

    script: Script
    workflow: str
    table: str

    @property
    def name(self) -> str:
        return self.script.name

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.script.main.steps


def reference_assistant() -> Assistant:
    workflow, table, path = "Order intake (reference)", "orders_reference", "src/orders.ts"
    steps = (
        Step(
            tool="build-workflow",
            arguments={"filePath": path, "sourceCode": n8n_source(workflow), "name": workflow},
            say=OPENING,
        ),
        Step(tool="data-tables", arguments={"action": "create", "name": table, "columns": COLUMNS}),
    )
    script = Script(
        name="reference", marker="data-tables", main=Phase(steps=steps, closing=CLOSING)
    )
    return Assistant(script=script, workflow=workflow, table=table)


def our_assistant() -> Assistant:
    workflow, table, path = "Order intake (bridge)", "orders_bridge", "src/orders.json"
    steps = (
        Step(
            tool="workspace_write_file",
            arguments={"path": path, "content": order_intake(workflow)},
            say=OPENING,
        ),
        Step(tool="build-workflow", arguments={"filePath": path}),
        Step(tool="create-data-table", arguments={"name": table, "columns": COLUMNS}),
    )
    script = Script(
        name="bridge", marker="create-data-table", main=Phase(steps=steps, closing=CLOSING)
    )
    return Assistant(script=script, workflow=workflow, table=table)


# -- the assertions, per assistant ---------------------------------------------------------


# The cards each assistant raises, by tool: n8n's own creates the workflow unasked; ours asks
# first under require_approval (a deliberate difference: the createWorkflow card), then both
# ask for the table.
CARDS = {"reference": ["data-tables"], "bridge": ["build-workflow", "create-data-table"]}


def assert_completed_with_its_cards(transcript: Transcript, assistant: Assistant) -> None:
    name = assistant.name
    finish = transcript.of_type("run-finish")
    assert finish and finish[-1]["payload"]["status"] == "completed", (name, finish)
    found = transcript.of_type("confirmation-request")
    assert [c["payload"]["toolName"] for c in found] == CARDS[name], (name, found)
    for event in found:
        assert event["payload"].get("inputType", "approval") == "approval", (name, event)
    if name == "bridge":  # createWorkflow: the card n8n gives saving into a workflow
        assert found[0]["payload"]["approvalDetails"]["action"] == "edit-workflow", found[0]
    card = found[-1]["payload"]
    assert card["toolName"] == assistant.steps[-1].tool, (name, card)
    statuses = [status for status, _ in transcript.confirmed]
    assert statuses == [200] * len(found), (name, transcript.confirmed)
    assert all(body["data"]["ok"] is True for _, body in transcript.confirmed), transcript.confirmed
    # After the table's approval: its tool result, then the closing text.
    events = transcript.events
    after = events[events.index(found[-1]) + 1 :]
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


# -- the test ------------------------------------------------------------------------------


@pytest.mark.timeout(900)
async def test_n8ns_assistant_and_ours_through_the_bridge_hold_one_conversation_alike(
    n8n_assistant: N8nAssistant, make_docker_settings: Callable[..., Settings]
) -> None:
    reference, ours = reference_assistant(), our_assistant()
    responder = Responder((reference.script, ours.script), title=TITLE)
    installed, n8n, model = n8n_assistant.installed, n8n_assistant.n8n, n8n_assistant.model
    model.responder = responder
    # Ours thinks too, as n8n's does (n8n asks its model with extended thinking on), and
    # runs with n8n's default permissions (every action require_approval), not the
    # tests' usual ones (with_model lets new workflows be created unasked).
    thinks = with_model(model, model_thinking_budget_tokens=THINKING_BUDGET, permissions={})
    settings = make_docker_settings(
        instance="n8n", n8n_url=n8n.url, n8n_api_key=n8n.api_key, **thinks
    )
    async with (
        serving(settings) as (app, _channel),
        bridge(n8n.url, app.port) as url,
        editor_session(n8n.url, n8n) as at_n8n,
        editor_session(url, n8n) as at_bridge,
    ):
        theirs = await converse(at_n8n, reference.name, ASK)
        mine = await converse(at_bridge, ours.name, ASK)
        # n8n names its thread with the model after the run: asked once both runs are over.
        theirs.title = await thread_title(at_n8n, theirs.thread_id)
        mine.title = await thread_title(at_bridge, mine.thread_id)
    # Of what the session's n8n holds, this conversation's (other tests share the n8n).
    all_workflows, all_tables = await in_n8n(n8n)
    workflows = all_workflows & {reference.workflow, ours.workflow}
    tables = all_tables & {reference.table, ours.table}

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

    assert not responder.problems, responder.problems
    for transcript, assistant in ((theirs, reference), (mine, ours)):
        assert_completed_with_its_cards(transcript, assistant)
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
