"""Every n8n permission key, walked through its three modes: each key gates the tools that do
its action (always_allow: done without asking; require_approval: asks the person; blocked:
refused, nothing done). (That an "always in this thread" answer covers one resource only is
tested with the agent: tests/test_agent_loop.py.)

Calls go through Tools.CallTool, where a call that would need a person's answer is refused
with FAILED_PRECONDITION saying so (the agent turns the same decision into a card)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from instance_ai.v1 import tools_pb2
from server.app import Application
from server.runtime.events import EventLog
from server.runtime.hitl import Hitl
from server.settings import GATED_ACTIONS, Settings
from server.store import Database
from server.store.models import GRANT_KEY_MAX
from server.tools.calls import grant_key
from server.wiring import ALL_TOOLS
from tests.conftest import serving
from tests.mcp_fixtures import connected, demo_stdio, running_gateway
from tests.tool_client import ToolClient, saved_workflow
from tests.web_servers import Servers, servers
from tests.workflow_json import chain, node

__all__ = ["servers"]  # fixtures, shared

THREAD = "perm"
MODES = ("always_allow", "require_approval", "blocked")
START = node("Start", "manualTrigger")
SHAPE = node("Shape", "set", 200, mode="manual", assignments={"assignments": []})
LINK = chain("Start", "Shape")


def source(name: str) -> str:
    return json.dumps({"name": name, "nodes": [START, SHAPE], "connections": LINK})


@dataclass
class World:
    """One server with every key in one mode, and a resource for each tool to act on."""

    app: Application
    tools: ToolClient
    servers: Servers
    ids: dict[str, str] = field(default_factory=dict)


async def make_world(app: Application, tools: ToolClient, servers: Servers) -> World:
    world = World(app, tools, servers)
    instance = app.parts.instance
    for name in ("main", "doomed", "restorable"):
        world.ids[name] = await saved_workflow(
            app, "elsewhere", name, nodes=[START, SHAPE], connections=LINK
        )
    # A second version, to restore the first.
    versions = await tools.call("list-workflow-versions", workflowId=world.ids["restorable"])
    world.ids["first_version"] = versions["versions"][-1]["versionId"]
    await saved_workflow(
        app, "elsewhere", "restorable", workflow_id=world.ids["restorable"], nodes=[START]
    )
    folders = instance.folders
    assert folders is not None
    world.ids["folder"] = (await folders.create("personal", "Doomed", None)).id
    world.ids["target_folder"] = (await folders.create("personal", "Archive", None)).id
    world.ids["table"] = (await instance.data_tables.create("Orders", [("sku", "string")])).id
    world.ids["doomed_table"] = (await instance.data_tables.create("Old", [("a", "string")])).id
    credential = await instance.credentials.create(
        project_id="personal", name="Old", type_name="httpHeaderAuth", data={"value": "x"}
    )
    world.ids["credential"] = credential.id
    for path, name in (("src/new.json", "New"), ("src/existing.json", "Main, changed")):
        await tools.call("workspace_write_file", path=path, content=source(name))
    return world


async def outcome(call: Awaitable[dict[str, Any]]) -> str:
    """done, asks (needs a person's answer) or blocked (refused by the permission)."""
    try:
        result = await call
    except grpc.aio.AioRpcError as error:
        details = error.details() or ""
        if error.code() is grpc.StatusCode.FAILED_PRECONDITION:
            if "blocked" in details:
                return "blocked"
            if "approval" in details or "answer" in details:
                return "asks"
        raise
    remediation = result.get("remediation") or {}
    if remediation.get("reason") == "permission_blocked":
        return "blocked"
    return "done"


Scenario = Callable[[World], Awaitable[dict[str, Any]]]
# One call doing each key's action.
SCENARIOS: dict[str, Scenario] = {
    "createWorkflow": lambda w: w.tools.call("build-workflow", filePath="src/new.json"),
    "updateWorkflow": lambda w: w.tools.call(
        "build-workflow", filePath="src/existing.json", workflowId=w.ids["main"]
    ),
    "runWorkflow": lambda w: w.tools.call("run-workflow", workflowId=w.ids["main"]),
    "publishWorkflow": lambda w: w.tools.call("publish-workflow", workflowId=w.ids["main"]),
    "deleteWorkflow": lambda w: w.tools.call("delete-workflow", workflowId=w.ids["doomed"]),
    "createCredential": lambda w: w.tools.call(
        "setup-credentials", credentialType="slackApi", reason="to post"
    ),
    "deleteCredential": lambda w: w.tools.call(
        "delete-credential", credentialId=w.ids["credential"]
    ),
    "createFolder": lambda w: w.tools.call("create-folder", name="Reports"),
    "deleteFolder": lambda w: w.tools.call("delete-folder", folderId=w.ids["folder"]),
    "moveWorkflowToFolder": lambda w: w.tools.call(
        "move-workflow-to-folder", workflowId=w.ids["main"], folderId=w.ids["target_folder"]
    ),
    "tagWorkflow": lambda w: w.tools.call(
        "tag-workflow", workflowId=w.ids["main"], tags=["checked"]
    ),
    "createDataTable": lambda w: w.tools.call(
        "create-data-table", name="Leads", columns=[{"name": "email", "type": "string"}]
    ),
    "deleteDataTable": lambda w: w.tools.call(
        "delete-data-table", dataTableId=w.ids["doomed_table"]
    ),
    "mutateDataTableSchema": lambda w: w.tools.call(
        "add-data-table-column", dataTableId=w.ids["table"], name="qty", type="number"
    ),
    "mutateDataTableRows": lambda w: w.tools.call(
        "insert-data-table-rows", dataTableId=w.ids["table"], rows=[{"sku": "A-1"}]
    ),
    "cleanupTestExecutions": lambda w: w.tools.call(
        "cleanup-test-executions", workflowId=w.ids["main"]
    ),
    "fetchUrl": lambda w: w.tools.call("fetch-url", url=w.servers.url("/notes.txt")),
    "webSearch": lambda w: w.tools.call("web-search", query="n8n"),
    "executeNode": lambda w: w.tools.call(
        "execute-node", type=SHAPE["type"], version=3.4, parameters=SHAPE["parameters"]
    ),
    "restoreWorkflowVersion": lambda w: w.tools.call(
        "restore-workflow-version",
        workflowId=w.ids["restorable"],
        versionId=w.ids["first_version"],
    ),
    # A tool of a configured MCP server, and one of the user's filesystem gateway.
    "executeMcpTool": lambda w: w.tools.call("demo__add", numbers={"a": 1, "b": 2}, mode="sum"),
    "readFilesystem": lambda w: w.tools.call("read_file", path="notes.md"),
}
# Where a mode means something else than done / asks / blocked.
EXPECTED: dict[tuple[str, str], str] = {
    # A direct call asking to build a new file is its caller's own request: no card. Through
    # the agent the person is asked first (tests/test_approval_cards.py).
    ("createWorkflow", "require_approval"): "done",
    # Choosing or creating a credential is the person's own act, in a card, in either mode.
    ("createCredential", "always_allow"): "asks",
}


@pytest.mark.parametrize("mode", MODES)
async def test_every_permission_key_gates_its_tools_in_each_mode(
    make_docker_settings: Callable[..., Settings], servers: Servers, mode: str, tmp_path: Path
) -> None:
    assert set(SCENARIOS) == set(GATED_ACTIONS)
    settings = make_docker_settings(
        permissions={key: mode for key in GATED_ACTIONS},
        web_fetch_allow_hosts=[f"127.0.0.1:{servers.site_port}"],
        searxng_url=servers.url(""),
        licensed_features=["workflowHistory"],
        mcp_servers={"demo": demo_stdio()},
        http_port=0,
    )
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "notes.md").write_text("# Notes\n")
    async with (
        serving(settings) as (app, channel),
        running_gateway(channel, tmp_path / "shared"),
    ):
        await connected(app, "demo")
        tools = ToolClient(channel, THREAD)
        world = await make_world(app, tools, servers)
        before = {k: await app.parts.instance.workflows.get(v) for k, v in world.ids.items()}
        seen = {key: await outcome(scenario(world)) for key, scenario in SCENARIOS.items()}
        expected = {
            key: EXPECTED.get((key, mode), {"require_approval": "asks"}.get(mode, mode))
            for key in SCENARIOS
        }
        expected = {k: {"always_allow": "done"}.get(v, v) for k, v in expected.items()}
        assert seen == expected
        if mode != "always_allow":
            # Nothing a refused or waiting call would have changed did change.
            for name in ("main", "doomed", "restorable"):
                now, then = await app.parts.instance.workflows.get(world.ids[name]), before[name]
                assert now is not None and then is not None
                assert now.current_version_id == then.current_version_id
                assert not now.is_archived
            assert await app.parts.instance.credentials.get(world.ids["credential"])
        listed = await tools.stub.ListTools(tools_pb2.ListToolsRequest())
    gated = {t.hitl_action for t in listed.tools if t.hitl_action}
    assert gated == set(SCENARIOS) - {"createWorkflow"}  # build-workflow lists updateWorkflow


async def test_a_node_runs_on_its_own_and_is_blocked_where_workflows_are(
    make_docker_settings: Callable[..., Settings],
) -> None:
    double = {
        "mode": "manual",
        "includeOtherFields": True,
        "assignments": {
            "assignments": [
                {"id": "d", "name": "double", "value": "={{ $json.n * 2 }}", "type": "number"}
            ]
        },
    }
    allowed = make_docker_settings(permissions={"executeNode": "always_allow"})
    async with serving(allowed) as (_app, channel):
        tools = ToolClient(channel, THREAD)
        ran = await tools.call(
            "execute-node",
            type=SHAPE["type"],
            version=3.4,
            parameters=double,
            input=[{"n": 2}, {"n": 5}],
        )
        assert ran == {
            "status": "success",
            "items": [{"n": 2, "double": 4}, {"n": 5, "double": 10}],
            "truncated": False,
        }
        wrong = await tools.refused("execute-node", type=SHAPE["type"], version=99, parameters={})
        assert wrong.code() is grpc.StatusCode.INVALID_ARGUMENT and "version" in (
            wrong.details() or ""
        )
    # Running workflows blocked, executeNode not set: a single node is blocked too.
    async with serving(make_docker_settings(permissions={"runWorkflow": "blocked"})) as (_a, ch):
        refused = await ToolClient(ch, THREAD).refused(
            "execute-node", type=SHAPE["type"], version=3.4, parameters=double
        )
        assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "executeNode: blocked" in (refused.details() or "")


async def test_per_resource_grants_fit_the_store_on_every_database(database_url: str) -> None:
    db = await Database.open(database_url)
    events = EventLog(db=db)
    try:
        hitl = Hitl(db=db, events=events, modes={})
        key = "executeNode:node:n8n-nodes-base.googleSheets:sheet:appendOrUpdate"  # 66 chars
        await hitl.always_allow("t", key)
        assert await hitl.mode("t", key) == "always_allow"
        assert await hitl.mode("t", key.replace("append", "delete")) == "require_approval"
    finally:
        await events.close()
        await db.close()
    # A resource named past what the store holds still gets its own grant, hashed.
    spec = next(s for s in ALL_TOOLS if s.name == "execute-node")
    long = spec.input_model(type="n8n-nodes-base." + "x" * 600, version=1)
    other = spec.input_model(type="n8n-nodes-base." + "y" * 600, version=1)
    keys = {grant_key(spec, long), grant_key(spec, other)}
    assert len(keys) == 2 and all(k and len(k) <= GRANT_KEY_MAX for k in keys)
