"""Workflow lifecycle tools through `Tools.CallTool`: archive, unarchive, publish, unpublish,
and the version history (registered only where the licence setting enables it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc
import pytest

from instance_ai.json_text import to_json
from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from server.app import Application
from server.settings import Settings
from tests.conftest import serving
from tests.tool_client import ToolClient, saved_workflow

ALLOW = {
    a: "always_allow"
    for a in ("deleteWorkflow", "updateWorkflow", "publishWorkflow", "restoreWorkflowVersion")
}


class Client(ToolClient):
    def __init__(self, app: Application, channel: grpc.aio.Channel) -> None:
        super().__init__(channel, "wf")
        self.app = app

    async def save(self, name: str, workflow_id: str | None = None) -> str:
        nodes = [{"name": "Start", "type": "n8n-nodes-base.manualTrigger", "parameters": {}}]
        return await saved_workflow(self.app, "wf", name, workflow_id=workflow_id, nodes=nodes)


@pytest.fixture
async def client(make_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
    settings = make_settings(
        permissions=ALLOW, licensed_features=["workflowHistory", "namedVersions"]
    )
    async with serving(settings) as (app, channel):
        yield Client(app, channel)


async def test_archive_unarchive_publish_unpublish(client: Client) -> None:
    workflow = await client.save("Orders")
    published = await client.call("publish-workflow", workflowId=workflow)
    draft = (await client.call("get-workflow", workflowId=workflow))["versionId"]
    assert published == {"success": True, "activeVersionId": draft}
    assert await client.call("delete-workflow", workflowId=workflow) == {"success": True}
    archived = await client.call("get-workflow", workflowId=workflow)
    assert archived["isArchived"] is True and archived.get("activeVersionId") is None
    listed = await client.call("list-workflows", status="archived")
    assert [w["id"] for w in listed["workflows"]] == [workflow]
    refused = await client.refused("publish-workflow", workflowId=workflow)
    assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "unarchive-workflow" in (refused.details() or "")
    await client.call("unarchive-workflow", workflowId=workflow)
    back = await client.call("get-workflow", workflowId=workflow)
    assert back["isArchived"] is False and back.get("activeVersionId") is None  # not republished
    await client.call("publish-workflow", workflowId=workflow)
    assert await client.call("unpublish-workflow", workflowId=workflow) == {"success": True}
    assert (await client.call("get-workflow", workflowId=workflow)).get("activeVersionId") is None
    missing = await client.refused("delete-workflow", workflowId="nope")
    assert missing.code() is grpc.StatusCode.NOT_FOUND


async def test_versions_list_get_restore_and_name(client: Client) -> None:
    workflow = await client.save("First")
    await client.save("Second", workflow)
    await client.save("Third", workflow)
    history = (await client.call("list-workflow-versions", workflowId=workflow))["versions"]
    assert [v["number"] for v in history] == [3, 2, 1]
    assert history[0]["isCurrentDraft"] and not history[2]["isCurrentDraft"]
    first = history[2]["versionId"]
    await client.call("publish-workflow", workflowId=workflow, versionId=first)
    detail = await client.call("get-workflow-version", workflowId=workflow, versionId=first)
    assert detail["workflowName"] == "First" and detail["isActive"] is True
    assert detail["nodes"][0]["name"] == "Start"

    restored = await client.call("restore-workflow-version", workflowId=workflow, versionId=first)
    current = await client.call("get-workflow", workflowId=workflow)
    assert current["versionId"] == restored["versionId"] and current["name"] == "First"
    assert current["activeVersionId"] == first  # the published version did not move
    page = await client.call("list-workflow-versions", workflowId=workflow, limit=2, skip=1)
    assert [v["number"] for v in page["versions"]] == [3, 2]

    await client.call(
        "update-workflow-version",
        workflowId=workflow,
        versionId=first,
        name="v1",
        description="go-live",
    )
    named = await client.call("get-workflow-version", workflowId=workflow, versionId=first)
    assert (named["name"], named["description"]) == ("v1", "go-live")
    other = await client.save("Elsewhere")
    foreign = await client.refused("get-workflow-version", workflowId=other, versionId=first)
    assert foreign.code() is grpc.StatusCode.NOT_FOUND


async def test_version_tools_are_registered_only_with_the_licence(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings()) as (_app, channel):
        stub = tools_pb2_grpc.ToolsStub(channel)
        registered = await stub.ListTools(tools_pb2.ListToolsRequest())
        names = {t.name for t in registered.tools}
        assert "publish-workflow" in names and "list-workflow-versions" not in names
        overview = await stub.ListTools(tools_pb2.ListToolsRequest(include_unavailable=True))
        versions = next(t for t in overview.tools if t.name == "list-workflow-versions")
        assert not versions.available and "workflowHistory" in versions.requires
        with pytest.raises(grpc.aio.AioRpcError) as absent:
            await stub.CallTool(
                tools_pb2.CallToolRequest(
                    thread_id="wf",
                    tool_name="list-workflow-versions",
                    arguments_json=to_json({"workflowId": "x"}),
                )
            )
        assert absent.value.code() is grpc.StatusCode.NOT_FOUND
        assert "not available" in (absent.value.details() or "")


async def test_gated_lifecycle_tools_need_approval(make_settings: Callable[..., Settings]) -> None:
    async with serving(make_settings()) as (app, channel):
        client = Client(app, channel)
        workflow = await client.save("Orders")
        for tool_name, action in [
            ("delete-workflow", "deleteWorkflow"),
            ("publish-workflow", "publishWorkflow"),
            ("unarchive-workflow", "updateWorkflow"),
        ]:
            refused = await client.refused(tool_name, workflowId=workflow)
            assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert action in (refused.details() or "")
        assert (await client.call("get-workflow", workflowId=workflow))["isArchived"] is False
