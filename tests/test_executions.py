"""Execution tools over real gRPC: saved workflows run on the real engine in the thread's
sandbox, recorded, read back, debugged and stopped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from server.settings import Settings
from tests.conftest import serving
from tests.test_build import ROOT, WORKFLOWS, Client
from tests.waiting import until


@pytest.fixture
async def client(make_docker_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
    # Direct calls of a gated tool need the permission (see test_agent_loop for approvals).
    settings = make_docker_settings(permissions={"runWorkflow": "always_allow"})
    async with serving(settings) as (app, channel):
        yield Client(app, channel)


async def saved(client: Client, source: Path, name: str | None = None) -> str:
    target = f"src/{name or source.name}"
    await client.write(target, await asyncio.to_thread(source.read_text))
    built = await client.build(target)
    assert built.success, built.errors
    return built.workflow_id


CODE_FLOW = """
import {{ node, trigger, workflow }} from '@n8n/workflow-sdk';
const start = trigger({{ type: 'n8n-nodes-base.manualTrigger', version: 1,
  config: {{ name: 'Start' }} }});
const work = node({{ type: 'n8n-nodes-base.code', version: 2,
  config: {{ name: 'Work', parameters: {{ jsCode: {code} }} }} }});
export default workflow('w', 'Code flow').add(start).to(work);
"""


async def code_workflow(client: Client, name: str, code: str, tmp: Path) -> str:
    source = tmp / f"{name}.workflow.ts"
    source.write_text(CODE_FLOW.format(code=json.dumps(code)))
    return await saved(client, source)


async def test_runs_are_recorded_and_read_back(client: Client) -> None:
    merge = await saved(client, WORKFLOWS / "merge-code.workflow.ts")
    ran = await client.call("run-workflow", workflowId=merge)
    assert ran["status"] == "success", ran
    assert ran["data"]["Total"] == [{"total": 30}]
    assert ran["startedAt"] <= ran["finishedAt"]
    again = await client.call("get-execution", executionId=ran["executionId"])
    assert again == ran
    output = await client.call("get-node-output", executionId=ran["executionId"], nodeName="Total")
    assert output == {"nodeName": "Total", "data": [[{"total": 30}]], "itemCounts": [1]}

    # The webhook's input is shaped as its envelope; the unpinned Slack node fails for want of
    # credentials, and debug-execution says where and with what input.
    intake = await saved(client, ROOT / "examples/order-intake.workflow.ts")
    failed = await client.call(
        "run-workflow", workflowId=intake, inputData={"body": {"orderId": "B-2", "amount": 5000}}
    )
    assert failed["status"] == "error" and "credentials" in failed["error"]
    assert failed["data"]["Order Intake"][0]["body"] == {"orderId": "B-2", "amount": 5000}
    debug = await client.call("debug-execution", executionId=failed["executionId"])
    assert debug["failedNode"]["name"] == "Announce"
    assert debug["failedNode"]["type"] == "n8n-nodes-base.slack"
    assert debug["failedNode"]["inputData"][0]["orderId"] == "B-2"
    assert [t["name"] for t in debug["nodeTrace"]] == [
        "Order Intake",
        "Prioritise",
        "Urgent?",
        "Announce",
    ]

    listed = await client.call("list-executions")
    assert [e["id"] for e in listed["executions"]] == [failed["executionId"], ran["executionId"]]
    assert listed["executions"][0]["workflowName"] == "Order intake"
    assert listed["executions"][0]["mode"] == "webhook"
    only_errors = await client.call("list-executions", status="error")
    assert [e["id"] for e in only_errors["executions"]] == [failed["executionId"]]
    by_workflow = await client.call("list-executions", workflowId=merge)
    assert [e["id"] for e in by_workflow["executions"]] == [ran["executionId"]]


async def test_a_run_past_its_timeout_is_stopped_and_recorded(
    client: Client, tmp_path: Path
) -> None:
    forever = await code_workflow(client, "forever", "for (;;) { await null; }", tmp_path)
    ran = await client.call("run-workflow", workflowId=forever, timeout=1000)
    assert ran["status"] == "error" and "did not finish within 1 s" in ran["error"]
    fine = await code_workflow(client, "fine", "return [{json: {ok: true}}];", tmp_path)
    assert (await client.call("run-workflow", workflowId=fine))["status"] == "success"


async def test_a_running_execution_can_be_stopped(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "pause.workflow.ts"
    source.write_text(
        "import { node, trigger, workflow } from '@n8n/workflow-sdk';\n"
        "const start = trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, "
        "config: { name: 'Start' } });\n"
        "const pause = node({ type: 'n8n-nodes-base.wait', version: 1.1, "
        "config: { name: 'Pause', parameters: { amount: 30, unit: 'seconds' } } });\n"
        "export default workflow('p', 'Pause').add(start).to(pause);\n"
    )
    workflow_id = await saved(client, source)
    running = asyncio.ensure_future(client.call("run-workflow", workflowId=workflow_id))

    async def running_id() -> str | None:
        listed = await client.call("list-executions", status="running")
        return listed["executions"][0]["id"] if listed["executions"] else None

    execution_id = await until(running_id, "the run listed as running", every_s=0.1)
    await asyncio.sleep(1.5)  # into the wait
    stopped = await client.call("stop-execution", executionId=execution_id)
    assert stopped["success"], stopped
    result = await asyncio.wait_for(running, timeout=15)
    assert result["status"] == "canceled"
    again = await client.call("stop-execution", executionId=execution_id)
    assert not again["success"] and "not running (status canceled)" in again["message"]


async def test_bad_requests(client: Client) -> None:
    merge = await saved(client, WORKFLOWS / "merge-code.workflow.ts")
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await client.call("run-workflow", workflowId="nope")
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as trigger:
        await client.call("run-workflow", workflowId=merge, triggerNodeName="Total")
    assert trigger.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "its triggers: Start" in (trigger.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as too_long:
        await client.call("run-workflow", workflowId=merge, timeout=600_001)
    assert too_long.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    ran = await client.call("run-workflow", workflowId=merge)
    with pytest.raises(grpc.aio.AioRpcError) as node:
        await client.call("get-node-output", executionId=ran["executionId"], nodeName="Nope")
    assert node.value.code() is grpc.StatusCode.NOT_FOUND
    assert "nodes that ran: Start" in (node.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as execution:
        await client.call("get-execution", executionId="exe_missing")
    assert execution.value.code() is grpc.StatusCode.NOT_FOUND
    assert not (await client.call("list-executions", workflowId="nope"))["executions"]
