"""Verification and the workflow loop over real gRPC: the real engine in a real sandbox, side
effects simulated by the build's plan, claims from evidence, verdicts moving work items."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import agent_pb2, pipeline_pb2
from server.settings import Settings
from tests.conftest import serving
from tests.test_build import WORKFLOWS, Client
from tests.tool_client import saved_workflow
from tests.workflow_json import chain, node


@pytest.fixture
async def client(make_docker_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
    async with serving(make_docker_settings()) as (app, channel):
        yield Client(app, channel)


async def build(client: Client, name: str) -> pipeline_pb2.BuildWorkflowResponse:
    built = await client.upload_and_build(name)
    assert built.success, built.errors
    assert built.work_item_id.startswith("wi_")
    return built


SNAKE_CASE = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)+$")
# Where the user's own data sits (node parameters, items, the model's arguments): any keys.
USER_DATA = {"parameters", "json", "pinData", "connections", "args", "inputData", "data"}


def snake_case_keys(value: Any, path: str = "") -> list[str]:
    """Paths of the snake_case keys in `value`, outside the user's own data."""
    if isinstance(value, list):
        return [k for i, item in enumerate(value) for k in snake_case_keys(item, f"{path}[{i}]")]
    if not isinstance(value, dict):
        return []
    found = [f"{path}.{key}" for key in value if SNAKE_CASE.match(key)]
    for key, item in value.items():
        if key not in USER_DATA:
            found += snake_case_keys(item, f"{path}.{key}")
    return found


def previews(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["nodeName"]: p for p in result["nodePreviews"]}


async def test_a_write_is_simulated_and_its_downstream_runs_on_the_fixture(
    client: Client,
) -> None:
    built = await build(client, "slack-then-set.workflow.ts")
    result = await client.call("verify-built-workflow", workflowId=built.workflow_id)
    assert result["success"] and result["status"] == "success"
    assert result["workItemId"] == built.work_item_id
    assert result["simulatedNodes"] == ["Post"]
    shown = previews(result)
    assert shown["Post"]["simulated"] and not shown["Record"]["simulated"]
    # The Set node ran for real on the fixture built from Slack's shipped output schema.
    assert json.loads(shown["Record"]["preview"]) == [{"postedTo": "example channel"}]
    assert result["claim"]["level"] == "partial"  # a write was simulated
    assert "Post" in result["simulationNote"]
    # The run is recorded, marked as a verification.
    execution = await client.app.parts.instance.executions.require(result["executionId"])
    assert execution.is_verification


async def test_claim_levels_come_from_the_evidence(client: Client, tmp_path: Path) -> None:
    merged = await build(client, "merge-code.workflow.ts")
    verified = await client.call("verify-built-workflow", workflowId=merged.workflow_id)
    assert verified["claim"]["level"] == "verified" and verified["claim"]["publishReady"]
    assert "Verified" in verified["guidance"]

    intake = await build(client, "order-intake.workflow.ts")
    small = await client.call(
        "verify-built-workflow",
        workflowId=intake.workflow_id,
        inputData={"body": {"orderId": "S-1", "amount": 10}},
    )
    # The webhook input went in as its envelope; the IF sent the small order to Queue.
    assert json.loads(previews(small)["Prioritise"]["preview"])[0]["urgent"] is False
    assert small["nodesNotReached"] == ["Announce"]
    assert small["claim"]["level"] == "partial"

    failing = (
        (WORKFLOWS / "merge-code.workflow.ts")
        .read_text()
        .replace(
            "return $input.all()", 'throw new Error("price list missing"); return $input.all()'
        )
    )
    await client.write("src/failing.workflow.ts", failing)
    broken = await client.build("src/failing.workflow.ts")
    failed = await client.call("verify-built-workflow", workflowId=broken.workflow_id)
    assert not failed["success"] and failed["claim"]["level"] == "failed"
    assert failed["failedNodeName"] == "Total"
    assert failed["remediation"]["category"] == "code_fixable"
    assert "Total" in failed["remediation"]["guidance"] and failed["remediation"]["shouldEdit"]
    assert failed["failureSignature"].startswith("Total:")
    assert failed["nodeErrors"] == [{"nodeName": "Total", "message": "price list missing"}]

    # A repair that targets a node the run only simulates proves nothing about it.
    await client.call(
        "report-verification-verdict",
        workItemId=intake.work_item_id,
        workflowId=intake.workflow_id,
        verdict="needs_patch",
        workflowInspection="Announce sends the wrong text",
        failedNodeName="Announce",
        failureSignature="Announce:wrong text",
    )
    rebuilt = await client.build("src/order-intake.workflow.ts")
    assert rebuilt.work_item_id == intake.work_item_id
    unproven = await client.call("verify-built-workflow", workflowId=intake.workflow_id)
    assert unproven["claim"]["level"] == "unproven"
    assert unproven["claim"]["unprovenTargets"] == ["Announce"]


async def test_each_trigger_gets_its_own_pass_with_its_input_shape(client: Client) -> None:
    built = await build(client, "triggers.workflow.ts")
    result = await client.call(
        "verify-built-workflow", workflowId=built.workflow_id, inputData={"email": "a@b.c"}
    )
    assert result["success"], result
    assert len(result["executionIds"]) == 4
    by_trigger = {}
    for execution_id in result["executionIds"]:
        execution = await client.app.parts.instance.executions.require(execution_id)
        output = execution.nodes[execution.trigger_node or ""]["outputs"][0]["items"][0]
        by_trigger[execution.trigger_node] = (execution.mode, output)
    assert by_trigger["Form"] == (
        "trigger",
        {**by_trigger["Form"][1], "formMode": "instanceAi", "email": "a@b.c"},
    )
    assert by_trigger["Hook"][0] == "webhook"
    assert by_trigger["Hook"][1]["body"] == {"email": "a@b.c"}
    assert by_trigger["Every Hour"][0] == "trigger"
    assert set(by_trigger["Every Hour"][1]) >= {"timestamp", "Day of week", "Hour"}
    assert by_trigger["Chat"] == (
        "chat",
        {**by_trigger["Chat"][1], "action": "sendMessage", "chatInput": '{"email": "a@b.c"}'},
    )
    one = await client.call(
        "verify-built-workflow", workflowId=built.workflow_id, triggerNodeName="Hook"
    )
    assert len(one["executionIds"]) == 1


async def test_the_same_failure_twice_blocks_and_budgets_hold(client: Client) -> None:
    built = await build(client, "merge-code.workflow.ts")
    verdict = {
        "workItemId": built.work_item_id,
        "workflowId": built.workflow_id,
        "verdict": "needs_rebuild",
        "workflowInspection": "Total multiplies the wrong fields",
        "failedNodeName": "Total",
        "failureSignature": "Total:wrong product",
        "diagnosis": "uses price twice",
    }
    first = await client.call("report-verification-verdict", **verdict)
    assert first["action"] == "rebuild" and first["phase"] == "repairing"
    assert (
        "uses price twice. Failed node: Total. Signature: Total:wrong product" in first["guidance"]
    )
    again = await client.build("src/merge-code.workflow.ts")
    assert again.work_item_id == built.work_item_id
    second = await client.call("report-verification-verdict", **verdict)
    assert second["action"] == "blocked" and second["status"] == "blocked"
    assert "Repeated repair failure: Total:wrong product" in second["guidance"]
    # Settled: further verdicts change nothing.
    third = await client.call("report-verification-verdict", **{**verdict, "verdict": "verified"})
    assert third["action"] == "blocked"

    item = await client.call("get-work-item", workItemId=built.work_item_id)
    assert item["status"] == "blocked"
    assert [a["action"] for a in item["attempts"]] == ["build", "rebuild", "build", "rebuild"]
    # camelCase, as everything a client sees.
    assert all("createdAt" in a and "created_at" not in a for a in item["attempts"])
    assert item["attempts"][-1]["failureSignature"] == "Total:wrong product"

    fresh = await build(client, "switch.workflow.ts")
    for _ in range(5):
        await client.call("verify-built-workflow", workflowId=fresh.workflow_id)
    with pytest.raises(grpc.aio.AioRpcError) as limit:
        await client.call("verify-built-workflow", workflowId=fresh.workflow_id)
    assert limit.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "attempt limit" in (limit.value.details() or "")


async def test_three_failed_builds_before_a_save_block_the_work_item(client: Client) -> None:
    await client.write("src/never.workflow.ts", "export default 1;\n")
    results = [await client.build("src/never.workflow.ts") for _ in range(3)]
    assert len({r.work_item_id for r in results}) == 1
    assert [r.remediation.should_edit for r in results] == [True, True, False]
    assert results[2].remediation.reason == "pre_save_submit_budget_exhausted"
    item = await client.call("get-work-item", workItemId=results[0].work_item_id)
    assert item["status"] == "blocked" and item["obligation"]["status"] == "blocked"


async def test_fixture_overrides_only_for_simulated_nodes(client: Client) -> None:
    built = await build(client, "slack-then-set.workflow.ts")
    wrong = await client.call(
        "verify-built-workflow",
        workflowId=built.workflow_id,
        fixtureOverrides={"Record": [{"x": 1}]},
    )
    assert not wrong["success"] and wrong["remediation"]["reason"] == "invalid_fixture_override"
    assert "'Record' is not simulated" in wrong["remediation"]["guidance"]
    empty = await client.call(
        "verify-built-workflow", workflowId=built.workflow_id, fixtureOverrides={"Post": []}
    )
    assert empty["remediation"]["reason"] == "zero_item_fixture_override"
    assert not empty["remediation"]["shouldEdit"]
    chosen = await client.call(
        "verify-built-workflow",
        workflowId=built.workflow_id,
        fixtureOverrides={"Post": [{"channel": "C-override"}]},
    )
    assert json.loads(previews(chosen)["Record"]["preview"]) == [{"postedTo": "C-override"}]


async def test_the_pipeline_rpcs_and_bad_requests(client: Client) -> None:
    built = await build(client, "merge-code.workflow.ts")
    response = await client.pipeline.VerifyWorkflow(
        pipeline_pb2.VerifyWorkflowRequest(thread_id="build-thread", workflow_id=built.workflow_id)
    )
    result = from_json(response.result_json)
    assert result["success"] and result["claim"]["level"] == "verified"
    verdict = await client.pipeline.ReportVerdict(
        pipeline_pb2.ReportVerdictRequest(
            thread_id="build-thread",
            work_item_id=built.work_item_id,
            workflow_id=built.workflow_id,
            verdict="verified",
            workflow_inspection="all five nodes ran",
        )
    )
    assert (verdict.action, verdict.status) == ("done", "completed")
    assert from_json(verdict.claim_json)["level"] == "verified"
    assert "Report completion" in verdict.guidance
    item = await client.pipeline.GetWorkItem(
        pipeline_pb2.GetWorkItemRequest(thread_id="build-thread", work_item_id=built.work_item_id)
    )
    work_item = from_json(item.work_item_json)
    assert work_item["obligation"]["status"] == "verified"
    # One key style, n8n's, in all a client reads (not inside the user's own data).
    events = [
        from_json(r.event.payload_json)
        async for r in client.agent.StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id="build-thread")
        )
    ]
    seen = [result, from_json(verdict.claim_json), work_item, *events]
    assert snake_case_keys(seen) == []

    cases: list[tuple[Callable[[], Awaitable[Any]], str]] = [
        (lambda: client.call("verify-built-workflow", workflowId="nope"), "NOT_FOUND"),
        (
            lambda: client.call(
                "verify-built-workflow", workflowId=built.workflow_id, workItemId="wi_nope"
            ),
            "NOT_FOUND",
        ),
        (
            lambda: client.call(
                "report-verification-verdict",
                workItemId=built.work_item_id,
                workflowId=built.workflow_id,
                verdict="verified",
                workflowInspection="",
            ),
            "INVALID_ARGUMENT",
        ),
        (
            lambda: client.pipeline.ReportVerdict(
                pipeline_pb2.ReportVerdictRequest(
                    thread_id="build-thread",
                    work_item_id=built.work_item_id,
                    workflow_id="another",
                    verdict="verified",
                    workflow_inspection="x",
                    remediation_json=to_json({"category": "blocked"}),
                )
            ),
            "INVALID_ARGUMENT",
        ),
    ]
    for call, code in cases:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await call()
        assert error.value.code().name == code


async def test_real_credentials_replace_mocked_ones_all_or_none(client: Client) -> None:
    built = await build(client, "slack-then-set.workflow.ts")
    assert list(built.mocked_credential_types) == ["slackApi"]  # no Slack credential yet
    slack = await client.app.parts.instance.credentials.create(
        project_id="personal", name="Slack", type_name="slackApi", data={"accessToken": "x"}
    )
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await client.call(
            "apply-workflow-credentials",
            workflowId=built.workflow_id,
            workItemId=built.work_item_id,
            credentials={
                "Post": {"slackApi": {"id": slack.id, "name": "Slack"}},
                "Nope": {"slackApi": {"id": slack.id, "name": "Slack"}},
            },
        )
    assert unknown.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    before = await client.call("get-workflow", workflowId=built.workflow_id)
    applied = await client.call(
        "apply-workflow-credentials",
        workflowId=built.workflow_id,
        workItemId=built.work_item_id,
        credentials={"Post": {"slackApi": {"id": slack.id, "name": "Slack"}}},
    )
    assert applied == {"updatedNodes": ["Post"]}
    after = await client.call("get-workflow", workflowId=built.workflow_id)
    post = next(n for n in after["nodes"] if n["name"] == "Post")
    assert post["credentials"] == {"slackApi": {"id": slack.id, "name": "Slack"}}
    assert after["versionId"] != before["versionId"]
    assert "credentials" not in next(n for n in before["nodes"] if n["name"] == "Post")
    # Real now, but posting is still a write: verification keeps simulating it.
    result = await client.call("verify-built-workflow", workflowId=built.workflow_id)
    assert result["simulatedNodes"] == ["Post"]


async def test_a_trigger_only_build_finishes_its_work_item_without_verification(
    client: Client,
) -> None:
    shape = {"mode": "manual", "assignments": {"assignments": []}}
    flow = {
        "name": "On push",
        "nodes": [
            node("On Push", "rssFeedReadTrigger", 0, feedUrl="https://example.com/feed.xml"),
            node("Shape", "set", 200, **shape),
        ],
        "connections": chain("On Push", "Shape"),
    }
    await client.write("src/push.json", json.dumps(flow))
    built = await client.build("src/push.json")
    assert built.success and built.trigger_only
    item = await client.call("get-work-item", workItemId=built.work_item_id)
    assert item["phase"] == "done" and item["status"] == "completed"
    manual = await build(client, "switch.workflow.ts")
    assert not manual.trigger_only
    pending = await client.call("get-work-item", workItemId=manual.work_item_id)
    assert pending["phase"] == "verifying"


async def test_a_plan_less_build_that_waits_after_output_counts_as_a_success(
    client: Client,
) -> None:
    shape = {"mode": "manual", "assignments": {"assignments": []}}
    nodes = [
        node("Start", "manualTrigger", 0),
        node("Shape", "set", 200, **shape),
        node("Hold", "wait", 400, resume="webhook"),
        node("After", "set", 600, **shape),
    ]
    names = [n["name"] for n in nodes]
    # Saved straight into the store, as builds were before plans: no simulation plan.
    legacy = await saved_workflow(
        client.app,
        "build-thread",
        "legacy",
        nodes=nodes,
        connections=chain(*names),
    )
    result = await client.call("verify-built-workflow", workflowId=legacy)
    assert result["status"] == "waiting" and result["success"], result
    assert "No simulation plan" in result["simulationNote"]
