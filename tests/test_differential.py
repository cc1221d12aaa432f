"""The differential suite (issue 37): five scripted conversations, each held with n8n 2.41.1's
own assistant and with ours behind the bridge, on one real n8n (the session's n8n with its
assistant, tests/sandbox_api_fixtures.py), both on the same scripted model and ours with n8n's
own permissions (its defaults: every action require_approval).

For each conversation the same is asserted of both assistants:

- the cards: their kinds (`inputType`, absent meaning approval), their severity, their
  `approvalDetails.action`, the resource they name;
- the gating: which calls asked and what the person answered, which ran unasked, which were
  refused;
- the outcome in n8n, read through n8n's public API.

The conversations: a plain build; saving into an existing workflow the thread did not create,
denied then approved; a plan whose build task ends without saving (the task fails, its
dependant is cancelled, a replan follows); a credential set up through its card; rows inserted
into an existing data table and then deleted.

One difference is deliberate and asserted as such: ours asks before creating a new workflow
(the createWorkflow card: approval, `approvalDetails.action` edit-workflow, the workflow's
name), n8n's creates it unasked. Everything else each side did is written to
docs/n8n-differential.json; docs/n8n-differential.md is the table of it."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from instance_ai_cli import n8n_local
from server.settings import GATED_ACTIONS, Settings
from tests.agent_fixtures import with_model
from tests.conftest import serving
from tests.differential_fixtures import (
    APPROVE,
    DENY,
    Answer,
    Done,
    Frame,
    Phase,
    Responder,
    Script,
    Step,
    Transcript,
    approve_all,
    as_n8n_reads,
    card_payloads,
    converse,
    editor_i18n,
    editor_session,
    first_run_finished,
    n8n_permissions,
    n8n_source,
    summary,
)
from tests.fake_model import FakeMessagesAPI
from tests.n8n_bridge_fixtures import START, bridge, order_intake
from tests.n8n_fixtures import N8nApi
from tests.sandbox_api_fixtures import (
    WITH_N8NS_ASSISTANT,
    N8nAssistant,
)

pytestmark = [WITH_N8NS_ASSISTANT, pytest.mark.timeout(900)]

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "n8n-differential.json"
SIDES = ("reference", "bridge")
THINKING_BUDGET = 1024
# Calls that only find tools or write the source a build reads: the steps one assistant needs
# and the other does not (n8n defers some tools; our build reads a workspace file).
PLUMBING = {"load_tool", "search_tools", "workspace_write_file"}
# One name per action for both assistants (n8n groups its tools: `data-tables` action X).
CANONICAL = {
    "data-tables:insert-rows": "insert-rows",
    "insert-data-table-rows": "insert-rows",
    "data-tables:delete-rows": "delete-rows",
    "delete-data-table-rows": "delete-rows",
    "data-tables:create": "create-data-table",
    "credentials:setup": "setup-credentials",
}
# The card ours raises where n8n's creates a workflow unasked (see the module's docstring).
CREATE_WORKFLOW_CARD = {
    "action": "build-workflow",
    "inputType": "approval",
    "severity": "warning",
    "approvalDetails": "edit-workflow",
}


# -- the stage: one n8n with its assistant, one scripted model -------------------------------


@dataclass(frozen=True, kw_only=True)
class Stage:
    installed: n8n_local.N8nInstall
    n8n: n8n_local.LocalN8n
    model: FakeMessagesAPI
    api: N8nApi
    # n8n's own assistant's permissions, which ours runs with.
    permissions: dict[str, str]
    i18n: dict[str, str]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def stage(n8n_assistant: N8nAssistant) -> AsyncIterator[Stage]:
    n8n = n8n_assistant.n8n
    async with editor_session(n8n.url, n8n) as editor:
        permissions = await n8n_permissions(editor)
    yield Stage(
        installed=n8n_assistant.installed,
        n8n=n8n,
        model=n8n_assistant.model,
        api=N8nApi(n8n),
        permissions=permissions,
        i18n=editor_i18n(n8n_assistant.installed),
    )


@asynccontextmanager
async def editors(
    stage: Stage, make_docker_settings: Callable[..., Settings]
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The owner in n8n's editor at n8n (its own assistant) and at our bridge (ours, whose
    instance is that n8n, on the same model, with n8n's permissions)."""
    # n8n asks its model with extended thinking on; ours thinks too. n8n's permissions
    # replace the tests' usual ones (with_model lets new workflows be created unasked).
    model = with_model(
        stage.model,
        model_thinking_budget_tokens=THINKING_BUDGET,
        permissions={k: v for k, v in stage.permissions.items() if k in GATED_ACTIONS},
    )
    settings = make_docker_settings(
        instance="n8n", n8n_url=stage.n8n.url, n8n_api_key=stage.n8n.api_key, **model
    )
    assert set(settings.permissions.values()) == {"require_approval"}, settings.permissions
    async with (
        serving(settings) as (app, _channel),
        bridge(stage.n8n.url, app.port) as url,
        editor_session(stage.n8n.url, stage.n8n) as at_n8n,
        editor_session(url, stage.n8n) as at_bridge,
    ):
        yield at_n8n, at_bridge


async def test_n8ns_assistant_runs_with_every_action_require_approval(stage: Stage) -> None:
    """n8n's defaults, which ours is given: every gated action asks."""
    assert set(GATED_ACTIONS) <= set(stage.permissions), stage.permissions
    assert set(stage.permissions.values()) == {"require_approval"}, stage.permissions


# -- reading a run: its cards and its gating ---------------------------------------------------


def action_of(tool: str, args: Any) -> str:
    """One name per action for both assistants."""
    action = args.get("action") if isinstance(args, dict) else None
    key = f"{tool}:{action}" if isinstance(action, str) else tool
    return CANONICAL.get(key, key)


def neutral(value: Any) -> Any:
    """A name with the assistant's suffix taken out (each side makes its own resources)."""
    if not isinstance(value, str):
        return value
    return re.sub(r"reference|bridge", "<side>", value)


def card_kinds(transcript: Transcript) -> list[dict[str, Any]]:
    """What kind of card each is, and on what."""
    kinds = []
    for card in card_payloads(transcript):
        kind: dict[str, Any] = {
            "action": action_of(card["toolName"], card.get("args")),
            "inputType": card.get("inputType", "approval"),
            "severity": card.get("severity"),
        }
        if details := card.get("approvalDetails"):
            kind["approvalDetails"] = details.get("action")
        if card.get("resourceName"):
            kind["resourceName"] = neutral(card["resourceName"])
        if requests := card.get("credentialRequests"):
            kind["credentialRequests"] = [r["credentialType"] for r in requests]
        kinds.append(kind)
    return kinds


def _answered(body: dict[str, Any] | None) -> str:
    if body is None:
        return "asked: unanswered"
    if body.get("kind") == "credentialSelection":
        return "asked: credential chosen"
    if body.get("kind") == "planDeny":
        return "asked: plan denied"
    return "asked: approved" if body.get("approved") else "asked: denied"


def _effect(ended: tuple[str, Any] | None) -> str:
    """How a call ended: done, denied (it says the person said no), failed, or an error."""
    if ended is None:
        return "no result"
    kind, value = ended
    if kind == "error":
        return "error"
    if isinstance(value, dict):
        remediation = value.get("remediation") or {}
        if value.get("denied") or remediation.get("reason") == "user_denied":
            return "denied"
        if value.get("success") is False:
            return "failed"
    return "done"


def gating(transcript: Transcript) -> list[dict[str, str]]:
    """Each call but the plumbing: its action, and whether it asked (and the answer), ran
    unasked, or was refused."""
    return [{"action": c["action"], "decision": c["decision"]} for c in calls(transcript)]


def effects(transcript: Transcript) -> list[str]:
    """How each call but the plumbing ended (see `_effect`)."""
    return [c["effect"] for c in calls(transcript)]


def calls(transcript: Transcript) -> list[dict[str, str]]:
    """Each call but the plumbing: its action, the decision on it and how it ended."""
    ended: dict[str, tuple[str, Any]] = {}
    for event in transcript.events:
        payload = event.get("payload") or {}
        if event["type"] == "tool-result":
            ended[payload["toolCallId"]] = ("result", payload.get("result"))
        elif event["type"] in ("tool-error", "tool-interrupted"):
            ended[payload["toolCallId"]] = ("error", payload.get("error"))
    asked = {card["toolCallId"]: card for card in card_payloads(transcript)}
    found = []
    for event in transcript.of_type("tool-call"):
        call = event["payload"]
        if call["toolName"] in PLUMBING:
            continue
        effect = _effect(ended.get(call["toolCallId"]))
        card = asked.get(call["toolCallId"])
        if card is not None:
            decision = _answered(transcript.answers.get(card["requestId"]))
        elif effect in ("error", "denied"):
            decision = "refused"
        else:
            decision = "ran unasked"
        action = action_of(call["toolName"], call.get("args"))
        found.append({"action": action, "decision": decision, "effect": effect})
    return found


def answered(transcript: Transcript) -> list[str]:
    """What each call but the plumbing answered, shortened (for the record)."""
    ended = {
        e["payload"]["toolCallId"]: e["payload"].get("result", e["payload"].get("error"))
        for e in transcript.events
        if e["type"] in ("tool-result", "tool-error", "tool-interrupted")
    }
    return [
        json.dumps(ended.get(e["payload"]["toolCallId"]), ensure_ascii=False)[:1200]
        for e in transcript.of_type("tool-call")
        if e["payload"]["toolName"] not in PLUMBING
    ]


def plumbing(transcript: Transcript) -> list[str]:
    return [
        e["payload"]["toolName"]
        for e in transcript.of_type("tool-call")
        if e["payload"]["toolName"] in PLUMBING
    ]


def results_of(transcript: Transcript, action: str) -> list[Any]:
    """The results of the calls of one action, in order."""
    ids = {
        e["payload"]["toolCallId"]
        for e in transcript.of_type("tool-call")
        if action_of(e["payload"]["toolName"], e["payload"].get("args")) == action
    }
    return [
        e["payload"]["result"]
        for e in transcript.of_type("tool-result")
        if e["payload"]["toolCallId"] in ids
    ]


def record(
    stage: Stage,
    key: str,
    transcripts: dict[str, Transcript],
    responder: Responder,
    outcome: dict[str, Any],
) -> dict[str, Any]:
    """Both runs read alike, written to docs/n8n-differential.json under `key`."""
    streams = [transcripts[side].events for side in SIDES]
    read = as_n8n_reads(stage.installed, streams)
    compared: dict[str, Any] = {}
    for side, view in zip(SIDES, read["views"], strict=True):
        transcript = transcripts[side]
        compared[side] = (
            {
                "card kinds": card_kinds(transcript),
                "gating": gating(transcript),
                "effects": effects(transcript),
                "results": answered(transcript),
                "plumbing": plumbing(transcript),
                "outcome": outcome.get(side),
                "answers": list(transcript.answers.values()),
            }
            | summary(transcript, stage.i18n)
            | {"editor view": view}
        )
    compared["contract refused"] = read["invalid"]
    compared["model requests"] = responder.asked
    compared["script problems"] = responder.problems
    written: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    written[key] = compared
    RESULTS.write_text(
        json.dumps(dict(sorted(written.items())), indent=2, ensure_ascii=False) + "\n"
    )
    return compared


async def hold(
    stage: Stage,
    make_docker_settings: Callable[..., Settings],
    scripts: dict[str, Script],
    ask: str,
    *,
    answer: Callable[[str], Answer] = lambda side: approve_all,
    done: Done = first_run_finished,
    between: Callable[[], Any] | None = None,
) -> tuple[dict[str, Transcript], Responder]:
    """The conversation with n8n's assistant, then with ours (after `between`, if any)."""
    responder = Responder((scripts["reference"], scripts["bridge"]), title="Differential")
    stage.model.responder = responder
    async with editors(stage, make_docker_settings) as (at_n8n, at_bridge):
        theirs = await converse(at_n8n, "reference", ask, answer=answer("reference"), done=done)
        if between is not None:
            await between()
        mine = await converse(at_bridge, "bridge", ask, answer=answer("bridge"), done=done)
    return {"reference": theirs, "bridge": mine}, responder


def assert_alike(compared: dict[str, Any], effects: list[str] | None = None) -> None:
    """The same cards (kinds, severities, details' actions, resources), the same gating, and
    (`effects`) the calls ending so on both sides."""
    reference, ours = compared["reference"], compared["bridge"]
    assert not compared["script problems"], compared["script problems"]
    assert ours["card kinds"] == reference["card kinds"]
    assert ours["gating"] == reference["gating"]
    if effects is not None:
        assert [reference["effects"], ours["effects"]] == [effects, effects]
    for side in SIDES:
        finish = compared[side]["run-finish"]
        assert finish == {"status": "completed"}, (side, finish)
    assert not [i for i in compared["contract refused"] if i["stream"] == 1], compared


# -- n8n's public API --------------------------------------------------------------------


async def workflow_named(api: N8nApi, name: str) -> dict[str, Any] | None:
    found = await api.call("GET", "/workflows?limit=250")
    match = [w for w in found["data"] if w["name"] == name]
    return match[0] if match else None


async def node_names(api: N8nApi, workflow_id: str) -> list[str]:
    workflow = await api.call("GET", f"/workflows/{workflow_id}")
    return sorted(node["name"] for node in workflow["nodes"])


async def rows_of(api: N8nApi, table_id: str) -> list[dict[str, Any]]:
    found = await api.call("GET", f"/data-tables/{table_id}/rows?limit=250")
    return [{k: row[k] for k in ("sku", "qty")} for row in found["data"]]


# -- 1. a plain build ----------------------------------------------------------------------


async def test_a_plain_build(stage: Stage, make_docker_settings: Callable[..., Settings]) -> None:
    """The workflow written and built. n8n's own assistant saves it unasked; ours asks first
    (the one deliberate difference), then both have it in n8n."""
    names = {side: f"Plain build ({side})" for side in SIDES}
    scripts = {
        "reference": Script(
            name="reference",
            marker="data-tables",
            main=Phase(
                steps=(
                    Step(
                        tool="build-workflow",
                        arguments={
                            "filePath": "src/plain.ts",
                            "sourceCode": n8n_source(names["reference"], slug="plain-build"),
                            "name": names["reference"],
                        },
                    ),
                ),
                closing="Built.",
            ),
        ),
        "bridge": Script(
            name="bridge",
            marker="create-data-table",
            main=Phase(
                steps=(
                    Step(
                        tool="workspace_write_file",
                        arguments={
                            "path": "src/plain.json",
                            "content": order_intake(names["bridge"]),
                        },
                    ),
                    Step(
                        tool="build-workflow",
                        arguments={"filePath": "src/plain.json", "name": names["bridge"]},
                    ),
                ),
                closing="Built.",
            ),
        ),
    }
    transcripts, responder = await hold(
        stage, make_docker_settings, scripts, "Build me a workflow: a manual trigger into a Set."
    )
    outcome = {}
    for side in SIDES:
        workflow = await workflow_named(stage.api, names[side])
        outcome[side] = {
            "workflow": names[side] if workflow else None,
            "nodes": await node_names(stage.api, workflow["id"]) if workflow else None,
        }
    compared = record(stage, "1 plain build", transcripts, responder, outcome)

    reference, ours = compared["reference"], compared["bridge"]
    assert not compared["script problems"], compared["script problems"]
    assert reference["card kinds"] == []
    assert reference["gating"] == [{"action": "build-workflow", "decision": "ran unasked"}]
    # The deliberate difference: ours = the reference's cards + the createWorkflow card.
    assert ours["card kinds"] == [
        *reference["card kinds"],
        CREATE_WORKFLOW_CARD | {"resourceName": "Plain build (<side>)"},
    ]
    assert ours["gating"] == [{"action": "build-workflow", "decision": "asked: approved"}]
    assert not compared["contract refused"], compared["contract refused"]
    for side in SIDES:
        assert compared[side]["effects"] == ["done"], side
        assert compared[side]["run-finish"] == {"status": "completed"}, side
        assert outcome[side] == {"workflow": names[side], "nodes": ["Shape", "Start"]}, side


# -- 2. saving into a workflow the thread did not create: denied, then approved -------------


async def test_saving_into_an_existing_workflow_asks_and_a_denial_saves_nothing(
    stage: Stage, make_docker_settings: Callable[..., Settings]
) -> None:
    names = {side: f"Invoice sync ({side})" for side in SIDES}
    ids: dict[str, str] = {}
    for side in SIDES:  # made beforehand, outside the thread: one node
        made = await stage.api.call(
            "POST",
            "/workflows",
            {"name": names[side], "nodes": [START], "connections": {}, "settings": {}},
        )
        ids[side] = made["id"]
    build_ts = {
        "filePath": "src/invoice.ts",
        "sourceCode": n8n_source(names["reference"], slug="invoice-sync"),
        "workflowId": ids["reference"],
        "name": names["reference"],
    }
    build_json = {"filePath": "src/invoice.json", "workflowId": ids["bridge"]}
    scripts = {
        "reference": Script(
            name="reference",
            marker="data-tables",
            main=Phase(
                steps=(
                    Step(tool="build-workflow", arguments=build_ts),
                    Step(tool="build-workflow", arguments=build_ts, say="Trying once more."),
                ),
                closing="Saved.",
            ),
        ),
        "bridge": Script(
            name="bridge",
            marker="create-data-table",
            main=Phase(
                steps=(
                    Step(
                        tool="workspace_write_file",
                        arguments={
                            "path": "src/invoice.json",
                            "content": order_intake(names["bridge"]),
                        },
                    ),
                    Step(tool="build-workflow", arguments=build_json),
                    Step(tool="build-workflow", arguments=build_json, say="Trying once more."),
                ),
                closing="Saved.",
            ),
        ),
    }
    after_denial: dict[str, list[str]] = {}

    def answer(side: str) -> Answer:
        async def decide(card: dict[str, Any], transcript: Transcript) -> dict[str, Any]:
            if not transcript.answers:
                return DENY
            # The second card: what the denied call left in n8n.
            after_denial[side] = await node_names(stage.api, ids[side])
            return APPROVE

        return decide

    transcripts, responder = await hold(
        stage,
        make_docker_settings,
        scripts,
        "Add a Set node after the trigger of my Invoice sync workflow.",
        answer=answer,
    )
    outcome = {
        side: {
            "nodes before": ["Start"],
            "nodes after the denial": after_denial.get(side),
            "nodes at the end": await node_names(stage.api, ids[side]),
        }
        for side in SIDES
    }
    compared = record(
        stage, "2 existing workflow, denied then approved", transcripts, responder, outcome
    )

    assert_alike(compared)
    assert (
        compared["reference"]["card kinds"]
        == [
            {
                "action": "build-workflow",
                "inputType": "approval",
                "severity": "warning",
                "approvalDetails": "edit-workflow",
                "resourceName": "Invoice sync (<side>)",
            }
        ]
        * 2
    )
    assert compared["reference"]["gating"] == [
        {"action": "build-workflow", "decision": "asked: denied"},
        {"action": "build-workflow", "decision": "asked: approved"},
    ]
    for side in SIDES:
        assert outcome[side]["nodes after the denial"] == ["Start"], (side, outcome)
        assert outcome[side]["nodes at the end"] == ["Shape", "Start"], (side, outcome)
        denied = results_of(transcripts[side], "build-workflow")[0]
        assert denied["success"] is False, (side, denied)


# -- 3. a plan whose build task fails -----------------------------------------------------


PLAN = {
    "tasks": [
        {
            "id": "build",
            "title": "Build the weekly report workflow",
            "kind": "build-workflow",
            "spec": "A manual trigger into a Set node that shapes the weekly report.",
            "deps": [],
        },
        {
            "id": "check",
            "title": "Check the weekly report",
            "kind": "checkpoint",
            "spec": "Run the workflow once and check that the report has its fields.",
            "deps": ["build"],
        },
    ],
    "planningContext": {
        "source": "planning-skill",
        "summary": "Build the weekly report workflow, then check it.",
    },
}
GAVE_UP = "I could not finish the weekly report workflow."
REPLANNED = "The build of the weekly report failed, so its check was cancelled."
NOT_SAVED = "Workflow build run ended without saving a workflow"
DEPENDANT = 'Cancelled: dependency "build" failed'


def replanned(transcript: Transcript, frame: Frame) -> bool:
    """Over once the replan follow-up's run has finished (or after too many runs)."""
    if frame.type != "run-finish":
        return False
    return REPLANNED in transcript.said() or len(transcript.of_type("run-finish")) >= 5


async def test_a_plan_whose_build_task_ends_without_saving_fails_and_is_replanned(
    stage: Stage, make_docker_settings: Callable[..., Settings]
) -> None:
    def script(name: str, marker: str) -> Script:
        return Script(
            name=name,
            marker=marker,
            main=Phase(
                steps=(Step(tool="create-tasks", arguments=PLAN),),
                closing="The plan is running.",
            ),
            follow_ups={
                "build-workflow": Phase(closing=GAVE_UP),
                "replan": Phase(closing=REPLANNED),
            },
        )

    scripts = {
        "reference": script("reference", "data-tables"),
        "bridge": script("bridge", "create-data-table"),
    }
    workflows_before = {w["name"] for w in (await stage.api.call("GET", "/workflows"))["data"]}
    transcripts, responder = await hold(
        stage,
        make_docker_settings,
        scripts,
        "Plan and build a weekly report workflow, then check it.",
        done=replanned,
    )
    workflows_after = {w["name"] for w in (await stage.api.call("GET", "/workflows"))["data"]}
    outcome: dict[str, Any] = {}
    for side in SIDES:
        updates = transcripts[side].of_type("tasks-update")
        last = updates[-1]["payload"]["tasks"]["tasks"] if updates else []
        tasks = {t["id"]: t for t in last if t["id"] in ("build", "check")}
        follow_ups = [r for r in responder.asked if r["assistant"] == side and "opener" in r]
        # n8n's follow-up carries the graph as JSON (its quotes escaped).
        replans = [r["opener"].replace('\\"', '"') for r in follow_ups if r["phase"] == "replan"]
        details = " ".join(str(t.get("detail", "")) for t in tasks.values())
        outcome[side] = {
            "tasks": {i: t["status"] for i, t in tasks.items()},
            "follow-up runs": [r["phase"] for r in follow_ups],
            "build failed as not saved": any(NOT_SAVED in text for text in replans),
            # Where the dependant's cancellation is told: the replan message, the checklist.
            "dependant cancelled, told in": [
                where
                for where, text in (("replan message", " ".join(replans)), ("checklist", details))
                if DEPENDANT in text
            ],
            "workflows made": sorted(workflows_after - workflows_before),
            "checklist at the end": last,
        }
    compared = record(stage, "3 plan with a failing task", transcripts, responder, outcome)

    assert_alike(compared)
    # n8n hands the run over to the plan once it is approved: its create-tasks call never
    # gets a result event (the editor shows it loading); ours answers it.
    assert compared["bridge"]["effects"] == ["done"]
    assert compared["reference"]["card kinds"] == [
        {"action": "create-tasks", "inputType": "plan-review", "severity": "info"}
    ]
    assert compared["reference"]["gating"] == [
        {"action": "create-tasks", "decision": "asked: approved"}
    ]
    for side in SIDES:
        found = outcome[side]
        assert found["tasks"] == {"build": "failed", "check": "cancelled"}, (side, found)
        assert "replan" in found["follow-up runs"], (side, found)
        assert found["build failed as not saved"], (side, found)
        assert found["dependant cancelled, told in"], (side, found)
        assert found["workflows made"] == [], (side, found)
        assert REPLANNED in transcripts[side].said(), side


# -- 4. a credential set up through its card ---------------------------------------------


async def test_a_credential_set_up_through_its_card(
    stage: Stage, make_docker_settings: Callable[..., Settings]
) -> None:
    kind = "notionApi"
    reason = "The workflow reads the team's Notion pages."
    scripts = {
        "reference": Script(
            name="reference",
            marker="data-tables",
            main=Phase(
                steps=(
                    Step(
                        tool="credentials",
                        arguments={
                            "action": "setup",
                            "credentials": [{"credentialType": kind, "reason": reason}],
                        },
                    ),
                ),
                closing="Notion is connected.",
            ),
        ),
        "bridge": Script(
            name="bridge",
            marker="create-data-table",
            main=Phase(
                steps=(
                    Step(
                        tool="setup-credentials",
                        arguments={"credentialType": kind, "reason": reason},
                    ),
                ),
                closing="Notion is connected.",
            ),
        ),
    }
    created: dict[str, str] = {}

    def answer(side: str) -> Answer:
        async def choose(card: dict[str, Any], transcript: Transcript) -> dict[str, Any]:
            # The person creates one in the card, then it is the one selected.
            made = await stage.api.call(
                "POST",
                "/credentials",
                {"name": f"Notion ({side})", "type": kind, "data": {"apiKey": "secret_test"}},
            )
            created[side] = str(made["id"])
            return {"kind": "credentialSelection", "credentials": {kind: created[side]}}

        return choose

    async def of_the_type() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await stage.api.call("GET", "/credentials"))["data"]
        return [c for c in found if c["type"] == kind]

    async def none_left() -> None:
        """Each side starts with no credential of the type (ours uses a sole one unasked)."""
        for found in await of_the_type():
            await stage.api.call("DELETE", f"/credentials/{found['id']}")

    in_n8n: dict[str, list[str]] = {}

    async def between() -> None:
        in_n8n["reference"] = sorted(c["name"] for c in await of_the_type())
        await none_left()

    await none_left()
    transcripts, responder = await hold(
        stage,
        make_docker_settings,
        scripts,
        "Connect my Notion account.",
        answer=answer,
        between=between,
    )
    in_n8n["bridge"] = sorted(c["name"] for c in await of_the_type())
    await none_left()
    outcome: dict[str, Any] = {}
    for side in SIDES:
        found = results_of(transcripts[side], "setup-credentials")
        result = found[0] if found else {}
        # n8n's names the credential chosen per type, ours the one credential.
        named = (result.get("credentials") or {}).get(kind) or result.get("credentialId")
        outcome[side] = {
            "credential created in the card": created.get(side),
            "the tool's result names": named,
            "in n8n": in_n8n.get(side),
        }
    compared = record(stage, "4 credential setup", transcripts, responder, outcome)

    assert_alike(compared, effects=["done"])
    assert compared["reference"]["card kinds"] == [
        {
            "action": "setup-credentials",
            "inputType": "approval",
            "severity": "info",
            "credentialRequests": [kind],
        }
    ]
    assert compared["reference"]["gating"] == [
        {"action": "setup-credentials", "decision": "asked: credential chosen"}
    ]
    for side in SIDES:
        card = card_payloads(transcripts[side])[0]
        assert card["credentialRequests"][0]["existingCredentials"] == [], (side, card)
        assert outcome[side]["the tool's result names"] == created[side], (side, outcome)
        assert outcome[side]["in n8n"] == [f"Notion ({side})"], (side, outcome)


# -- 5. rows inserted into an existing table, then deleted ---------------------------------


async def test_rows_inserted_then_deleted_in_an_existing_table(
    stage: Stage, make_docker_settings: Callable[..., Settings]
) -> None:
    names = {side: f"stock_{side}" for side in SIDES}
    columns = [{"name": "sku", "type": "string"}, {"name": "qty", "type": "number"}]
    tables: dict[str, str] = {}
    for side in SIDES:  # made beforehand, outside the thread
        made = await stage.api.call(
            "POST", "/data-tables", {"name": names[side], "columns": columns}
        )
        tables[side] = str(made["id"])
    rows = [{"sku": "A-1", "qty": 3}, {"sku": "B-2", "qty": 0}]
    where = {"type": "and", "filters": [{"columnName": "qty", "condition": "eq", "value": 0}]}
    scripts = {
        "reference": Script(
            name="reference",
            marker="data-tables",
            main=Phase(
                steps=(
                    Step(
                        tool="data-tables",
                        arguments={
                            "action": "insert-rows",
                            "dataTableId": tables["reference"],
                            "dataTableName": names["reference"],
                            "rows": rows,
                        },
                    ),
                    Step(
                        tool="data-tables",
                        arguments={
                            "action": "delete-rows",
                            "dataTableId": tables["reference"],
                            "dataTableName": names["reference"],
                            "filter": where,
                        },
                    ),
                ),
                closing="A-1 is in stock; B-2 is gone.",
            ),
        ),
        "bridge": Script(
            name="bridge",
            marker="create-data-table",
            main=Phase(
                steps=(
                    Step(
                        tool="insert-data-table-rows",
                        arguments={"dataTableId": tables["bridge"], "rows": rows},
                    ),
                    Step(
                        tool="delete-data-table-rows",
                        arguments={"dataTableId": tables["bridge"], "filter": where},
                    ),
                ),
                closing="A-1 is in stock; B-2 is gone.",
            ),
        ),
    }
    transcripts, responder = await hold(
        stage,
        make_docker_settings,
        scripts,
        "Add A-1 (3) and B-2 (0) to my stock table, then remove what has none.",
    )
    outcome = {side: {"rows": await rows_of(stage.api, tables[side])} for side in SIDES}
    compared = record(stage, "5 data-table rows", transcripts, responder, outcome)

    assert_alike(compared, effects=["done", "done"])
    assert compared["reference"]["card kinds"] == [
        {
            "action": "insert-rows",
            "inputType": "approval",
            "severity": "warning",
            "approvalDetails": "insert-rows",
            "resourceName": "stock_<side>",
        },
        {
            "action": "delete-rows",
            "inputType": "approval",
            "severity": "destructive",
            "approvalDetails": "delete-rows",
            "resourceName": "stock_<side>",
        },
    ]
    assert compared["reference"]["gating"] == [
        {"action": "insert-rows", "decision": "asked: approved"},
        {"action": "delete-rows", "decision": "asked: approved"},
    ]
    # The details the cards show, the rows' preview and the filter, alike too.
    details = {
        side: [c["approvalDetails"] for c in card_payloads(transcripts[side])] for side in SIDES
    }
    assert details["bridge"] == details["reference"]
    for side in SIDES:
        assert outcome[side] == {"rows": [{"sku": "A-1", "qty": 3}]}, (side, outcome)
