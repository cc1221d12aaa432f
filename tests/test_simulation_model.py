"""The model's pass over the simulation plan: it decides the nodes no rule decides and writes
fixtures for simulated ones; the rules still win; a model that fails or answers outside the
schema leaves the deterministic plan, and verification says so. Through real gRPC, a real
sandbox and the Messages API stand-in (which sees the one `answer` tool request)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from server.pipeline.judgement import judge_plan
from server.pipeline.simulation import PlanEntry
from server.settings import Settings
from tests.agent_fixtures import model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, tool
from tests.test_build import Client
from tests.workflow_json import chain, node

__all__ = ["model"]  # fixtures, shared


WORKFLOW = json.dumps(
    {
        "name": "Order to Slack",
        "nodes": [
            node("Start", "manualTrigger", 0),
            node("Create", "httpRequest", 200, method="POST", url="https://api.example.com/o"),
            node(
                "Post",
                "slack",
                400,
                resource="message",
                operation="post",
                select="channel",
                channelId={"__rl": True, "mode": "id", "value": "C1"},
                text="={{ $json.id }}",
            ),
            node(
                "Record",
                "set",
                600,
                mode="manual",
                includeOtherFields=False,
                assignments={
                    "assignments": [
                        {"id": "a", "name": "order", "value": "={{ $('Create').item.json.id }}"}
                        | {"type": "number"},
                        {"id": "b", "name": "channel", "value": "={{ $json.channel }}"}
                        | {"type": "string"},
                    ]
                },
            ),
        ],
        "connections": chain("Start", "Create", "Post", "Record"),
    }
)


@pytest.fixture
async def client(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> AsyncIterator[Client]:
    settings = make_docker_settings(**with_model(model, simulation_model_pass=True))
    async with serving(settings) as (app, channel):
        yield Client(app, channel)


async def plan_of(client: Client, workflow_id: str) -> dict[str, dict[str, Any]]:
    saved = await client.call("get-workflow", workflowId=workflow_id)
    _, plan = await client.app.parts.instance.workflows.verification_inputs(saved["versionId"])
    return {e["nodeName"]: e for e in plan or []}


async def test_the_model_decides_ambiguous_nodes_and_writes_fixtures_but_not_over_the_rules(
    client: Client, model: FakeMessagesAPI
) -> None:
    model.script(
        tool(
            "answer",
            {
                "decisions": [
                    {"nodeName": "Create", "verdict": "simulate", "reason": "it creates an order"},
                    # A rule already simulates the Slack post: the model cannot run it.
                    {"nodeName": "Post", "verdict": "execute", "reason": "harmless"},
                ],
                "fixtures": {
                    "Create": [{"id": 4711}],
                    "Post": [{"ok": True, "channel": "C777"}],
                    "Record": [{"order": 0}],  # runs for real: no fixture for it
                },
            },
        )
    )
    await client.write("src/order.json", WORKFLOW)
    built = await client.build("src/order.json")
    assert built.success, built.errors
    # One request, offering only the answer tool, asking about the ambiguous node.
    (request,) = model.requests
    assert [t["name"] for t in request["tools"]] == ["answer"]
    asked = json.loads(request["messages"][0]["content"][0]["text"])
    assert [d["nodeName"] for d in asked["decide"]] == ["Create"]
    assert set(asked["fixtures"]) == {"Create", "Post"}
    plan = await plan_of(client, built.workflow_id)
    assert (plan["Create"]["verdict"], plan["Create"]["source"]) == ("simulate", "model")
    assert "creates an order" in plan["Create"]["reason"]
    assert (plan["Post"]["verdict"], plan["Post"]["source"]) == ("simulate", "mocked")
    assert (plan["Record"]["verdict"], "fixture" in plan["Record"]) == ("execute", False)

    result = await client.call("verify-built-workflow", workflowId=built.workflow_id)
    assert result["success"], result
    assert result["simulatedNodes"] == ["Create", "Post"]
    record = next(p for p in result["nodePreviews"] if p["nodeName"] == "Record")
    # Record ran for real on the model's fixtures.
    assert json.loads(record["preview"]) == [{"order": 4711, "channel": "C777"}]

    # A real Slack credential replans Post only; the model's judgement of Create stays.
    slack = await client.app.parts.instance.credentials.create(
        project_id="personal", name="Slack", type_name="slackApi", data={"accessToken": "x"}
    )
    await client.call(
        "apply-workflow-credentials",
        workflowId=built.workflow_id,
        workItemId=built.work_item_id,
        credentials={"Post": {"slackApi": {"id": slack.id}}},
    )
    after = await plan_of(client, built.workflow_id)
    assert (after["Post"]["verdict"], after["Post"]["source"]) == ("simulate", "rule")
    assert after["Create"] == plan["Create"] and after["Create"]["fixture"] == [{"id": 4711}]


async def test_an_answer_outside_the_schema_leaves_the_deterministic_plan_and_says_so(
    client: Client, model: FakeMessagesAPI
) -> None:
    model.script(tool("answer", {"decisions": [{"nodeName": "Create", "verdict": "maybe"}]}))
    await client.write("src/order.json", WORKFLOW)
    built = await client.build("src/order.json")
    assert built.success
    plan = await plan_of(client, built.workflow_id)
    assert (plan["Create"]["verdict"], plan["Create"]["source"]) == ("simulate", "fallback")
    assert "schema" in plan["Create"]["modelError"]
    result = await client.call("verify-built-workflow", workflowId=built.workflow_id)
    assert "Create" in result["simulatedNodes"]
    assert "did not fit the schema" in result["simulationNote"]


async def test_a_model_that_fails_leaves_the_deterministic_plan(
    client: Client, model: FakeMessagesAPI
) -> None:
    model.script(Turn(fault=400))
    await client.write("src/order.json", WORKFLOW)
    built = await client.build("src/order.json")
    assert built.success
    plan = await plan_of(client, built.workflow_id)
    assert plan["Create"]["source"] == "fallback"
    assert "could not be asked" in plan["Create"]["modelError"]


def entry(name: str, verdict: str, source: str) -> PlanEntry:
    return PlanEntry(
        node_name=name,
        verdict=verdict,  # type: ignore[arg-type]
        reason="r",
        confidence="low" if source == "fallback" else "high",
        source=source,  # type: ignore[arg-type]
    )


async def test_the_merge_rules_without_a_server() -> None:
    plan = [
        entry("Read", "simulate", "fallback"),
        entry("Declared", "simulate", "declared"),
        entry("Write", "simulate", "rule"),
        entry("Shape", "execute", "rule"),
    ]

    async def answers(_instructions: str, _prompt: str, _schema: dict[str, Any]) -> Any:
        return {
            "decisions": [
                {"nodeName": "Read", "verdict": "execute", "reason": "a GET"},
                {"nodeName": "Shape", "verdict": "simulate", "reason": "no"},
            ],
            "fixtures": {"Declared": [{"x": 1}], "Write": [{"ok": 1}] * 11, "Read": [{"a": 1}]},
        }

    judged = {
        e.node_name: e
        for e in await judge_plan(answers, {}, plan, declared={"Declared"}, timeout_s=5)
    }
    assert (judged["Read"].verdict, judged["Read"].source) == ("execute", "model")
    assert judged["Read"].fixture is None  # it runs for real
    assert judged["Shape"].verdict == "execute"  # a rule's verdict stands
    assert judged["Declared"].fixture is None  # the source's own output wins
    assert judged["Write"].fixture is None  # more items than a fixture may have

    async def slow(_instructions: str, _prompt: str, _schema: dict[str, Any]) -> Any:
        await asyncio.sleep(5)

    timed_out = await judge_plan(slow, {}, plan, declared=set(), timeout_s=0.05)
    assert "did not answer within 0.05 s" in (timed_out[0].model_error or "")
    assert [e.model_error for e in timed_out[1:]] == [None, None, None]
