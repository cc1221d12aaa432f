"""Build: the real SDK in a real sandbox, through real gRPC (Pipeline.BuildWorkflow and
Tools.CallTool), saving into the real workflow store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    pipeline_pb2,
    pipeline_pb2_grpc,
    tools_pb2,
    tools_pb2_grpc,
)
from server.app import Application
from server.settings import Settings
from tests.conftest import serving
from tests.test_cli import CLI

WORKFLOWS = Path(__file__).parent / "workflows"
ROOT = Path(__file__).resolve().parents[1]
# Sources read from elsewhere in the repository: the seed's template and the bundled example.
SOURCES = {
    "manual-set-if.workflow.ts": ROOT
    / "sandbox/image/seed/knowledge-base/templates/order-router.workflow.ts",
    "order-intake.workflow.ts": ROOT / "examples/order-intake.workflow.ts",
}
THREAD = "build-thread"


class Client:
    """The three stubs a build test talks through, bound to one thread."""

    def __init__(self, app: Application, channel: grpc.aio.Channel) -> None:
        self.app = app
        self.pipeline = pipeline_pb2_grpc.PipelineStub(channel)
        self.tools = tools_pb2_grpc.ToolsStub(channel)
        self.agent = agent_pb2_grpc.AgentStub(channel)

    async def call(self, tool: str, thread: str = THREAD, **arguments: Any) -> dict[str, Any]:
        response = await self.tools.CallTool(
            tools_pb2.CallToolRequest(
                thread_id=thread, tool_name=tool, arguments_json=to_json(arguments)
            )
        )
        return from_json(response.result_json)

    async def write(self, path: str, content: str, thread: str = THREAD) -> None:
        await self.call("workspace_write_file", thread, path=path, content=content)

    async def build(
        self, path: str, thread: str = THREAD, **fields: Any
    ) -> pipeline_pb2.BuildWorkflowResponse:
        response: pipeline_pb2.BuildWorkflowResponse = await self.pipeline.BuildWorkflow(
            pipeline_pb2.BuildWorkflowRequest(thread_id=thread, file_path=path, **fields)
        )
        return response

    async def upload_and_build(
        self, name: str, **fields: Any
    ) -> pipeline_pb2.BuildWorkflowResponse:
        await self.write(f"src/{name}", SOURCES.get(name, WORKFLOWS / name).read_text())
        return await self.build(f"src/{name}", **fields)

    async def workflows(self) -> list[dict[str, Any]]:
        return list((await self.call("list-workflows", status="all"))["workflows"])


@pytest.fixture
async def client(make_docker_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
    async with serving(make_docker_settings()) as (app, channel):
        yield Client(app, channel)


def graph(workflow: dict[str, Any]) -> tuple[dict[str, str], set[tuple[str, str, int, str]]]:
    """Node types by name, and edges as (from, connection type, output index, to)."""
    nodes = {node["name"]: node["type"] for node in workflow["nodes"]}
    edges = {
        (source, kind, index, target["node"])
        for source, outputs in workflow["connections"].items()
        for kind, slots in outputs.items()
        for index, targets in enumerate(slots)
        for target in targets or []
    }
    return nodes, edges


def messages(issues: Any) -> str:
    return "\n".join(f"{i.source}: {i.message}" for i in issues)


SHAPES: dict[str, tuple[dict[str, str], set[tuple[str, str, int, str]]]] = {
    "manual-set-if.workflow.ts": (
        {
            "Start": "n8n-nodes-base.manualTrigger",
            "Label Order": "n8n-nodes-base.set",
            "Is Large?": "n8n-nodes-base.if",
            "Large Order": "n8n-nodes-base.noOp",
            "Small Order": "n8n-nodes-base.noOp",
        },
        {
            ("Start", "main", 0, "Label Order"),
            ("Label Order", "main", 0, "Is Large?"),
            ("Is Large?", "main", 0, "Large Order"),
            ("Is Large?", "main", 1, "Small Order"),
        },
    ),
    "order-intake.workflow.ts": (
        {
            "Order Intake": "n8n-nodes-base.webhook",
            "Prioritise": "n8n-nodes-base.set",
            "Urgent?": "n8n-nodes-base.if",
            "Announce": "n8n-nodes-base.slack",
            "Queue": "n8n-nodes-base.noOp",
        },
        {
            ("Order Intake", "main", 0, "Prioritise"),
            ("Prioritise", "main", 0, "Urgent?"),
            ("Urgent?", "main", 0, "Announce"),
            ("Urgent?", "main", 1, "Queue"),
        },
    ),
    "webhook-http-slack.workflow.ts": (
        {
            "Order Webhook": "n8n-nodes-base.webhook",
            "Look Up Customer": "n8n-nodes-base.httpRequest",
            "Announce": "n8n-nodes-base.slack",
        },
        {
            ("Order Webhook", "main", 0, "Look Up Customer"),
            ("Look Up Customer", "main", 0, "Announce"),
        },
    ),
    "switch.workflow.ts": (
        {
            "Start": "n8n-nodes-base.manualTrigger",
            "By Priority": "n8n-nodes-base.switch",
            "High": "n8n-nodes-base.noOp",
            "Normal": "n8n-nodes-base.noOp",
            "Low": "n8n-nodes-base.noOp",
        },
        {
            ("Start", "main", 0, "By Priority"),
            ("By Priority", "main", 0, "High"),
            ("By Priority", "main", 1, "Normal"),
            ("By Priority", "main", 2, "Low"),
        },
    ),
    "merge-code.workflow.ts": (
        {
            "Start": "n8n-nodes-base.manualTrigger",
            "Prices": "n8n-nodes-base.set",
            "Counts": "n8n-nodes-base.set",
            "Combine": "n8n-nodes-base.merge",
            "Total": "n8n-nodes-base.code",
        },
        {
            ("Start", "main", 0, "Prices"),
            ("Start", "main", 0, "Counts"),
            ("Prices", "main", 0, "Combine"),
            ("Counts", "main", 0, "Combine"),
            ("Combine", "main", 0, "Total"),
        },
    ),
    "ai-agent.workflow.ts": (
        {
            "Chat": "@n8n/n8n-nodes-langchain.chatTrigger",
            "Assistant": "@n8n/n8n-nodes-langchain.agent",
            "Model": "@n8n/n8n-nodes-langchain.lmChatOpenAi",
            "History": "@n8n/n8n-nodes-langchain.memoryBufferWindow",
        },
        {
            ("Chat", "main", 0, "Assistant"),
            ("Model", "ai_languageModel", 0, "Assistant"),
            ("History", "ai_memory", 0, "Assistant"),
        },
    ),
}


async def test_workflows_of_several_shapes_build_to_their_graphs(client: Client) -> None:
    for name, (nodes, edges) in SHAPES.items():
        built = await client.upload_and_build(name)
        assert built.success, f"{name}: {messages(built.errors)}"
        assert built.workflow_id and len(built.source_hash) == 64
        assert not built.HasField("remediation")
        saved = await client.call("get-workflow", workflowId=built.workflow_id)
        assert graph(saved) == (nodes, edges), name
        assert saved["name"] == built.workflow_name
    # Declared fixtures never reach the saved workflow; the Merge inputs land on 0 and 1.
    router = await client.call("list-workflows", query="order router")
    saved = await client.call("get-workflow", workflowId=router["workflows"][0]["id"])
    assert "pinData" not in saved
    merge = next(w for w in await client.workflows() if w["name"] == "Merge and total")
    combine = await client.call("get-workflow", workflowId=merge["id"])
    inputs = sorted(
        t["index"] for n in ("Prices", "Counts") for t in combine["connections"][n]["main"][0]
    )
    assert inputs == [0, 1]
    # The source names credentials the user does not have: the slots are mocked (taken off).
    webhook = next(w for w in await client.workflows() if w["name"] == "Webhook to Slack")
    slack_flow = await client.call("get-workflow", workflowId=webhook["id"])
    announce = next(n for n in slack_flow["nodes"] if n["name"] == "Announce")
    assert "credentials" not in announce
    assert len(await client.workflows()) == len(SHAPES)


async def test_a_build_stores_its_fixtures_and_simulation_plan_beside_the_workflow(
    client: Client,
) -> None:
    built = await client.upload_and_build("order-intake.workflow.ts")
    saved = await client.call("get-workflow", workflowId=built.workflow_id)
    fixtures, plan = await client.app.parts.instance.workflows.verification_inputs(
        saved["versionId"]
    )
    assert fixtures == {
        "Order Intake": [{"body": {"orderId": "A-7", "amount": 1200, "customer": "Acme"}}]
    }
    assert plan is not None
    verdicts = {e["nodeName"]: (e["verdict"], e["source"]) for e in plan}
    # The webhook is fed by the run's input (its declared sample is the default): not planned.
    assert verdicts == {
        "Prioritise": ("execute", "rule"),
        "Urgent?": ("execute", "rule"),
        "Announce": ("simulate", "mocked"),  # no Slack credential yet (it also posts)
        "Queue": ("execute", "rule"),
    }
    ai = await client.upload_and_build("ai-agent.workflow.ts")
    ai_saved = await client.call("get-workflow", workflowId=ai.workflow_id)
    _, ai_plan = await client.app.parts.instance.workflows.verification_inputs(
        ai_saved["versionId"]
    )
    assert ai_plan == [
        {
            "nodeName": "Assistant",
            "verdict": "simulate",
            "reason": "its chat model has no usable credentials",
            "confidence": "high",
            "source": "ai_root",  # the model's credential was mocked
        }
    ]


FAILURES: dict[str, tuple[str, str, str]] = {
    # name: (source, layer expected first, text the message must contain)
    "syntax": (
        "import { workflow } from '@n8n/workflow-sdk';\n"
        "const x = ;\n"
        "export default workflow('a', 'A');\n",
        "load",
        "src/syntax.workflow.ts(2,",
    ),
    "no-default-export": (
        "import { workflow } from '@n8n/workflow-sdk';\nexport const wf = workflow('a', 'A');\n",
        "export",
        "export default workflow(",
    ),
    "not-a-workflow": (
        "export default { hello: 'world' };\n",
        "export",
        "not a workflow() builder",
    ),
    "missing-import": (
        "import { helper } from './does-not-exist';\nexport default helper;\n",
        "load",
        "does-not-exist",
    ),
    "endless-loop": ("while (true) {}\nexport default 1;\n", "timeout", "did not finish within"),
    "huge-allocation": (
        "const hoard: number[][] = [];\n"
        "while (true) hoard.push(new Array(1e6).fill(hoard.length));\n"
        "export default hoard;\n",
        "load",
        "256 MB",
    ),
}


async def test_each_failure_class_is_a_failed_build_that_saves_nothing(
    make_docker_settings: Callable[..., Settings],
) -> None:
    # A deadline that the 256 MB allocation reaches its cap well within, also on a busy
    # machine (the endless loop meets it all the same).
    settings = make_docker_settings(build_compile_timeout_seconds=20)
    async with serving(settings) as (app, channel):
        await _each_failure_class(Client(app, channel))


async def _each_failure_class(client: Client) -> None:
    for name, (source, layer, text) in FAILURES.items():
        path = f"src/{name}.workflow.ts"
        await client.write(path, source)
        built = await client.build(path)
        assert not built.success, name
        assert built.errors[0].source == layer, f"{name}: {messages(built.errors)}"
        assert text in built.errors[0].message, f"{name}: {messages(built.errors)}"
        assert built.remediation.category == "code_fixable" and built.remediation.should_edit
        assert not built.workflow_id
    # The deadline and the memory cap replaced the compile thread: the next build works.
    assert (await client.upload_and_build("manual-set-if.workflow.ts")).success

    # 5 MB: larger than a gRPC message, so made in the sandbox.
    await client.call(
        "workspace_execute_command",
        command="node -e \"fs.writeFileSync('src/big.workflow.ts', '// padding\\n'.repeat(5e5))\"",
    )
    too_big = await client.build("src/big.workflow.ts")
    assert not too_big.success and too_big.errors[0].source == "input"
    assert "larger than 1048576 bytes" in too_big.errors[0].message
    assert "chunks/" in too_big.errors[0].message

    for path, text in [
        ("../etc/passwd.ts", "outside the workspace"),
        ("src/missing.workflow.ts", "does not exist"),
        ("src/notes.txt", "not a workflow source"),
        (
            "import { workflow } from '@n8n/workflow-sdk';\nexport default workflow('a','A');",
            "not source code",
        ),
    ]:
        refused = await client.build(path)
        assert not refused.success and refused.errors[0].source == "input", path
        assert text in refused.errors[0].message, messages(refused.errors)
    assert [w["name"] for w in await client.workflows()] == ["Order router"]


async def test_load_failures_get_typescript_diagnostics_after_the_original(
    client: Client,
) -> None:
    source = (
        "import { workflow } from '@n8n/workflow-sdk';\n"
        "const count: number = 'three';\n"
        "export const wf = workflow('a', 'A');\n"
    )
    await client.write("src/no-export.workflow.ts", source)
    built = await client.build("src/no-export.workflow.ts")
    assert [e.source for e in built.errors] == ["export", "typescript"]
    diagnostic = built.errors[1]
    assert (diagnostic.file, diagnostic.line, diagnostic.column, diagnostic.code) == (
        "src/no-export.workflow.ts",
        2,
        7,
        "TS2322",
    )
    assert diagnostic.message.startswith("src/no-export.workflow.ts(2,7): error TS2322: ")


async def test_a_typescript_check_out_of_time_keeps_the_original_errors(
    make_docker_settings: Callable[..., Settings],
) -> None:
    settings = make_docker_settings(build_diagnostics_timeout_seconds=0.001)
    async with serving(settings) as (app, channel):
        client = Client(app, channel)
        await client.write("src/none.workflow.ts", "const n: number = 'one';\nexport {};\n")
        built = await client.build("src/none.workflow.ts")
        assert [e.source for e in built.errors] == ["export"]


async def test_schema_and_type_errors_carry_file_line_and_column(client: Client) -> None:
    broken = await client.upload_and_build("typed-broken.workflow.ts")
    assert not broken.success
    schema = next(e for e in broken.errors if e.source == "schema")
    assert (schema.code, schema.node_name, schema.line) == ("INVALID_PARAMETER", "Fetch Orders", 9)
    assert schema.column > 0 and schema.file == "src/typed-broken.workflow.ts"
    typed = next(e for e in broken.errors if e.source == "typescript")
    assert (typed.code, typed.line) == ("TS2322", 9)
    assert "'\"FETCH\"' is not assignable" in typed.message

    typo = await client.upload_and_build("typed-typo.workflow.ts")
    assert not typo.success
    by_source = {e.source: e for e in typo.errors}
    assert "'urll'" in by_source["catalog"].message and "'url'" in by_source["catalog"].message
    assert by_source["typescript"].code == "TS2561" and by_source["typescript"].line == 9
    # Without the opt-in type, the catalog layer still catches the misspelled key.
    plain = (WORKFLOWS / "typed-typo.workflow.ts").read_text()
    typed_import = next(line for line in plain.splitlines(keepends=True) if "import type" in line)
    plain = plain.replace("node<HttpRequestV42Node>", "node").replace(typed_import, "")
    await client.write("src/plain-typo.workflow.ts", plain)
    untyped = await client.build("src/plain-typo.workflow.ts")
    assert [e.code for e in untyped.errors if e.source == "catalog"] == ["UNKNOWN_PARAMETER"]


async def test_catalog_layer_checks_types_versions_and_credentials(client: Client) -> None:
    built = await client.upload_and_build("catalog-errors.workflow.ts")
    assert not built.success
    errors = {(e.code, e.node_name): e.message for e in built.errors}
    assert "Did you mean n8n-nodes-base.slack," in errors[("UNKNOWN_NODE_TYPE", "Ghost")]
    assert (
        "Available versions: 1, 2, 3, 3.1, 3.2, 3.3, 3.4, 3.5"
        in errors[("UNKNOWN_NODE_VERSION", "Old Set")]
    )
    assert "takes slackApi, slackOAuth2Api" in errors[("CREDENTIAL_SLOT_MISMATCH", "Chat")]
    assert ("UNKNOWN_CREDENTIAL_TYPE", "Chat") in errors
    warnings = {(w.code, w.node_name) for w in built.warnings}
    assert ("DEPRECATED_NODE_TYPE", "Retired") in warnings
    assert {e.source for e in built.errors} >= {"catalog", "credentials"}
    assert await client.workflows() == []


async def test_the_same_file_built_twice_updates_one_workflow(client: Client) -> None:
    first = await client.upload_and_build("manual-set-if.workflow.ts")
    path = "src/manual-set-if.workflow.ts"
    await client.call(
        "workspace_str_replace_file",
        oldString="'Small Order'",
        newString="'Minor Order'",
        path=path,
    )
    second = await client.build(path)
    assert second.success and second.workflow_id == first.workflow_id
    assert second.source_hash != first.source_hash
    store = client.app.parts.instance.workflows
    assert await store.version_count(first.workflow_id) == 2
    saved = await client.call("get-workflow", workflowId=first.workflow_id)
    assert "Minor Order" in graph(saved)[0]
    binding = await store.binding(THREAD, path)
    assert binding is not None and binding.source_hash == second.source_hash
    assert len(await client.workflows()) == 1
    # Each build is in the thread's log: the call and its result.
    events = [
        e
        async for e in client.agent.StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id=THREAD, follow=False)
        )
    ]
    builds = [
        from_json(e.event.payload_json)
        for e in events
        if e.event.type == "tool-call"
        and from_json(e.event.payload_json)["toolName"] == "build-workflow"
    ]
    results = {
        from_json(e.event.payload_json)["toolCallId"]: from_json(e.event.payload_json)["result"]
        for e in events
        if e.event.type == "tool-result"
    }
    assert [results[b["toolCallId"]]["workflowId"] for b in builds] == [first.workflow_id] * 2


async def test_racing_first_builds_of_one_file_make_one_workflow(client: Client) -> None:
    await client.write("src/race.workflow.ts", (WORKFLOWS / "switch.workflow.ts").read_text())
    results = await asyncio.gather(*(client.build("src/race.workflow.ts") for _ in range(4)))
    assert all(r.success for r in results)
    assert len({r.workflow_id for r in results}) == 1
    assert await client.app.parts.instance.workflows.version_count(results[0].workflow_id) == 4


async def test_round_trip_through_workflow_as_code(client: Client) -> None:
    for name in ("manual-set-if.workflow.ts", "ai-agent.workflow.ts"):
        built = await client.upload_and_build(name)
        before = await client.call("get-workflow", workflowId=built.workflow_id)
        code = (await client.call("get-workflow-as-code", workflowId=built.workflow_id))["code"]
        assert code.startswith("import {") and "export default" in code
        copy = f"src/copy-{name}"
        await client.write(copy, code)
        again = await client.build(copy, workflow_id=built.workflow_id)
        assert again.success, messages(again.errors)
        assert again.workflow_id == built.workflow_id
        after = await client.call("get-workflow", workflowId=built.workflow_id)
        assert graph(after) == graph(before)
        # Without workflowId the copy's file stays bound to the same workflow.
        assert (await client.build(copy)).workflow_id == built.workflow_id
        # WorkflowJSON sources build directly, through the same validation.
        as_json = {k: after[k] for k in ("name", "nodes", "connections", "settings")}
        await client.write(f"src/{name}.json", json.dumps(as_json))
        from_json = await client.build(f"src/{name}.json")
        assert from_json.success, messages(from_json.errors)
        copied = await client.call("get-workflow", workflowId=from_json.workflow_id)
        assert graph(copied) == graph(before) and from_json.workflow_id != built.workflow_id


async def test_a_deleted_bound_workflow_blocks_instead_of_recreating(client: Client) -> None:
    built = await client.upload_and_build("switch.workflow.ts")
    await client.app.parts.instance.workflows.set_archived(built.workflow_id, True)
    blocked = await client.build("src/switch.workflow.ts")
    assert not blocked.success and blocked.workflow_id == built.workflow_id
    assert blocked.remediation.category == "blocked" and not blocked.remediation.should_edit
    assert blocked.remediation.reason == "bound_workflow_deleted"
    assert "unarchive-workflow" in blocked.remediation.guidance
    assert len(await client.workflows()) == 1
    assert await client.app.parts.instance.workflows.version_count(built.workflow_id) == 1
    # Binding a file to a workflow that does not exist is refused the same way.
    unknown = await client.upload_and_build(
        "merge-code.workflow.ts", workflow_id="nope12345678abcd"
    )
    assert not unknown.success and unknown.remediation.reason == "workflow_not_found"
    assert len(await client.workflows()) == 1


async def test_catalog_tools(client: Client) -> None:
    async def first_hits(query: str, count: int = 3) -> list[str]:
        found = await client.call("search-nodes", query=query, limit=count)
        return [node["name"] for node in found["nodes"]]

    assert (await first_hits("slack"))[0] == "n8n-nodes-base.slack"
    assert (await first_hits("Google Sheets"))[0] == "n8n-nodes-base.googleSheets"
    assert (await first_hits("http request"))[0] == "n8n-nodes-base.httpRequest"
    assert "n8n-nodes-base.googleSheets" in await first_hits("spreadsheet")
    assert (await first_hits("curl"))[0] == "n8n-nodes-base.httpRequest"
    assert (await first_hits("slack trigger"))[0] == "n8n-nodes-base.slackTrigger"

    slack = (await client.call("search-nodes", query="slack", limit=1))["nodes"][0]
    message = next(r for r in slack["discriminators"]["resources"] if r["resource"] == "message")
    assert "post" in message["operations"]
    agent = (await client.call("search-nodes", query="AI Agent", limit=1))["nodes"][0]
    assert agent["name"] == "@n8n/n8n-nodes-langchain.agent"
    required = {r["connectionType"]: r["required"] for r in agent["subnodeRequirements"]}
    assert required["ai_languageModel"] is True and required["ai_memory"] is False
    assert "subnodes" in agent["builderHint"]

    catalog = await client.app.parts.catalog.get()
    assert len([n for n in catalog.nodes if n.startswith("n8n-nodes-base.")]) == 444
    assert len(catalog.credentials) >= 409
    listed = await client.call("list-nodes", limit=1000)
    assert listed["total"] > 500  # 444 base types and the AI nodes, retired ones left out
    description = await client.call("get-node-description", nodeType="n8n-nodes-base.httpRequest")
    assert description["version"] == 4.5
    assert "url" in {p["name"] for p in description["properties"]}
    definition = await client.call(
        "get-node-type-definition", nodeType="n8n-nodes-base.httpRequest", version=4.2
    )
    assert "export interface HttpRequestV42Params" in definition["content"]
    assert definition["importPath"] == "@n8n/node-types/n8n-nodes-base/httpRequest/v42"
    split = await client.call(
        "get-node-type-definition",
        nodeType="n8n-nodes-base.slack",
        version=2.3,
        resource="message",
        operation="post",
    )
    assert split["file"] == "slack/v23/resource_message/operation_post.ts"
    assert {"resource": "message", "operation": "post"} in split["discriminators"]
    by_mode = await client.call(
        "get-node-type-definition",
        nodeType="n8n-nodes-base.code",
        version=2,
        mode="runOnceForAllItems",
    )
    assert by_mode["file"] == "code/v2/mode_run_once_for_all_items.ts"
    assert (
        by_mode["importPath"]
        == "@n8n/node-types/n8n-nodes-base/code/v2/mode_run_once_for_all_items"
    )
    suggested = await client.call("get-suggested-nodes")
    categories = {c["category"]: [n["name"] for n in c["nodes"]] for c in suggested["categories"]}
    assert "n8n-nodes-base.webhook" in categories["triggers"]
    assert all(len(names) >= 3 for names in categories.values())  # every curated type exists
    credentials = await client.call("search-credential-types", query="slack")
    assert credentials["credentialTypes"][0]["name"] in {"slackApi", "slackOAuth2Api"}

    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await client.call("get-node-description", nodeType="n8n-nodes-base.slakc")
    assert missing.value.code() is grpc.StatusCode.NOT_FOUND
    assert "n8n-nodes-base.slack" in (missing.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as version:
        await client.call("get-node-description", nodeType="n8n-nodes-base.set", version=9)
    assert "available: 1, 2, 3, 3.1" in (version.value.details() or "")


async def test_bad_requests_get_clear_statuses(client: Client) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as inline:
        await client.call("build-workflow", source="export default 1", filePath="src/a.ts")
    assert inline.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "source" in (inline.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await client.call("no-such-tool")
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as no_thread:
        await client.build("src/a.workflow.ts", thread="")
    assert no_thread.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    listed = await client.tools.ListTools(tools_pb2.ListToolsRequest())
    schemas = {tool.name: from_json(tool.input_schema_json) for tool in listed.tools}
    assert schemas["build-workflow"]["required"] == ["filePath"]


async def test_cli_builds_a_file_and_searches_nodes(client: Client, tmp_path: Path) -> None:
    server = f"127.0.0.1:{client.app.port}"

    async def cli(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            CLI,
            *args,
            "--server",
            server,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await process.communicate()
        assert process.returncode is not None
        return process.returncode, stdout.decode(), stderr.decode()

    code, out, err = await cli("build", str(WORKFLOWS / "switch.workflow.ts"), "--json")
    assert code == 0, err
    first = json.loads(out)
    assert first["success"] and first["filePath"] == "src/switch.workflow.ts"
    code, out, _ = await cli("build", str(WORKFLOWS / "switch.workflow.ts"), "--json")
    assert json.loads(out)["workflowId"] == first["workflowId"]
    broken = tmp_path / "broken.workflow.ts"
    broken.write_text("export default 42;\n")
    code, out, _ = await cli("build", str(broken))
    assert code == 1 and "build failed" in out and "(export)" in out
    code, out, _ = await cli("build", str(broken), "--json")
    failed = json.loads(out)
    assert code == 1 and failed["success"] is False and failed["errors"]
    code, out, err = await cli("nodes", "search", "google sheets", "--json")
    assert code == 0, err
    assert json.loads(out)["nodes"][0]["name"] == "n8n-nodes-base.googleSheets"
