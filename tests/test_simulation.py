"""The simulation plan: the deterministic classifier, rule by rule, and the plan's overrides."""

from __future__ import annotations

from typing import Any

import pytest

from server.pipeline.simulation import (
    Ambiguous,
    classify,
    main_flow_nodes,
    mocked_nodes,
    plan_simulation,
)


def node(type_: str, name: str = "N", **parameters: Any) -> dict[str, Any]:
    full = type_ if "." in type_ else f"n8n-nodes-base.{type_}"
    return {"name": name, "type": full, "typeVersion": 1, "parameters": parameters}


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        # 1. Real credentials alone decide nothing (mocked ones are the plan's rule).
        ({**node("set"), "credentials": {"x": {"id": "1"}}}, "execute"),
        # 2. Safe types.
        (node("set"), "execute"),
        (node("if"), "execute"),
        (node("@n8n/n8n-nodes-langchain.agent"), "execute"),
        # 3. Always simulated.
        (node("emailSend"), "simulate"),
        (node("executeCommand"), "simulate"),
        (node("executeWorkflow"), "simulate"),
        # 4. HTTP: reads run, anything else is ambiguous.
        (node("httpRequest"), "execute"),
        (node("httpRequest", method="HEAD"), "execute"),
        (node("httpRequest", method="POST"), None),
        (node("httpRequest", method="delete"), None),
        # 5. Form pages wait for a person.
        (node("form"), "simulate"),
        # 6. Wait: up to 60 s runs, longer or resumed by something else is simulated.
        (node("wait", amount=30, unit="seconds"), "execute"),
        (node("wait", amount=1, unit="minutes"), "execute"),
        (node("wait", amount=61, unit="seconds"), "simulate"),
        (node("wait"), "simulate"),  # default: 1 hour
        (node("wait", resume="webhook"), "simulate"),
        # 7. Code that may reach out is ambiguous.
        (node("code", jsCode="return items.map(i => i);"), "execute"),
        (node("code", jsCode="const r = await fetch('https://x');"), None),
        (node("code", jsCode="this.helpers.httpRequest({})"), None),
        (node("function", functionCode="require('child_process')"), None),
        # 8. Operations by their letters.
        (node("slack", resource="message", operation="post"), "simulate"),
        (node("gmail", operation="send"), "simulate"),
        (node("googleSheets", operation="appendOrUpdate"), "simulate"),
        (node("googleSheets", operation="delete_rows"), "simulate"),
        (node("notion", operation="getAll"), "execute"),
        (node("airtable", operation="search"), "execute"),
        (node("someNode", mode="upsert"), "simulate"),
        # 9. Nothing decides.
        (node("someNode"), None),
        (node("someNode", operation="frobnicate"), None),
    ],
)
def test_the_classifier_rules(subject: dict[str, Any], expected: str | None) -> None:
    decision = classify(subject)
    if expected is None:
        assert isinstance(decision, Ambiguous), decision
    else:
        assert not isinstance(decision, Ambiguous) and decision[0] == expected, decision


def link(source: str, target: str, kind: str = "main") -> tuple[str, str, str]:
    return source, target, kind


def workflow(nodes: list[dict[str, Any]], *links: tuple[str, str, str]) -> dict[str, Any]:
    connections: dict[str, Any] = {}
    for source, target, kind in links:
        connections.setdefault(source, {}).setdefault(kind, [[]])[0].append(
            {"node": target, "type": kind, "index": 0}
        )
    return {"nodes": nodes, "connections": connections}


def is_trigger(type_name: str) -> bool:
    return type_name.endswith(("Trigger", ".webhook"))


def runs_in_sandbox(type_name: str) -> bool:
    return type_name.startswith("n8n-nodes-base.")


def plan_of(flow: dict[str, Any], declared: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
    entries = plan_simulation(
        flow, declared_outputs=declared, is_trigger=is_trigger, runs_in_sandbox=runs_in_sandbox
    )
    return {e.node_name: (e.verdict, e.source) for e in entries}


def test_the_plan_covers_the_main_flow_with_overrides() -> None:
    flow = workflow(
        [
            node("manualTrigger", "Start"),
            node("githubTrigger", "On Push"),
            node("set", "Shape"),
            node("slack", "Notify", operation="post"),
            node("httpRequest", "Create", method="POST"),
            node("noOp", "Declared"),
            node("@n8n/n8n-nodes-langchain.agent", "Agent"),
            node("@n8n/n8n-nodes-langchain.lmChatOpenAi", "Model"),
            {**node("set", "Off"), "disabled": True},
            node("stickyNote", "Note"),
            node("set", "Loose"),
        ],
        link("Start", "Shape"),
        link("On Push", "Shape"),
        link("Shape", "Notify"),
        link("Shape", "Create"),
        link("Shape", "Declared"),
        link("Shape", "Agent"),
        link("Model", "Agent", "ai_languageModel"),
        link("Shape", "Off"),
    )
    assert plan_of(flow, declared=("Declared",)) == {
        "On Push": ("simulate", "trigger"),  # cannot be fired in a test run
        "Shape": ("execute", "rule"),
        "Notify": ("simulate", "rule"),
        "Create": ("simulate", "fallback"),  # ambiguous and no model: simulated to be safe
        "Declared": ("simulate", "declared"),
        "Agent": ("simulate", "ai_root"),  # its model has no credentials
    }
    # Supported triggers, disabled nodes, sticky notes, sub-nodes and loose nodes stay out.
    assert main_flow_nodes(flow) >= {"Start", "Shape", "Agent"}


def test_an_ai_root_with_a_credentialed_model_is_left_to_the_sandbox_rule() -> None:
    model = {**node("@n8n/n8n-nodes-langchain.lmChatOpenAi", "Model"), "credentials": {"a": {}}}
    flow = workflow(
        [node("manualTrigger", "Start"), node("@n8n/n8n-nodes-langchain.agent", "Agent"), model],
        link("Start", "Agent"),
        link("Model", "Agent", "ai_languageModel"),
    )
    # The model has credentials, but the AI nodes' code is not in the sandbox.
    assert plan_of(flow) == {"Agent": ("simulate", "sandbox")}


def test_mocked_credentials_simulate_their_node_and_survive_a_saved_plan() -> None:
    reader = {**node("httpRequest", "Fetch"), "credentials": {"httpHeaderAuth": {"id": "c1"}}}
    flow = workflow(
        [node("manualTrigger", "Start"), reader, node("googleSheets", "Read", operation="read")],
        link("Start", "Fetch"),
        link("Fetch", "Read"),
    )
    entries = plan_simulation(
        flow,
        declared_outputs=("Fetch",),
        mocked={"Fetch": ["httpHeaderAuth"], "Read": ["googleSheetsOAuth2Api"]},
        is_trigger=is_trigger,
        runs_in_sandbox=runs_in_sandbox,
    )
    # A declared output still wins; a read with mocked credentials is simulated, not run.
    assert {e.node_name: (e.verdict, e.source) for e in entries} == {
        "Fetch": ("simulate", "declared"),
        "Read": ("simulate", "mocked"),
    }
    saved = [e.as_json() for e in entries]
    assert mocked_nodes(saved) == {"Read": ["googleSheetsOAuth2Api"]}
    assert "mockedCredentialTypes" not in saved[0]
    # Without the mock, the same read runs for real with its (real) credentials.
    assert plan_of(flow) == {"Fetch": ("execute", "rule"), "Read": ("execute", "rule")}
