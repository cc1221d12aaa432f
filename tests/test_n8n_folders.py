"""n8n's folders follow its licence while the service runs: against a real n8n 2.41.1 in its
own test mode (`E2E_TESTS=true`), where a licence feature is switched on and off at run time
(`PATCH /rest/e2e/feature`), as a licence change would. Without `feat:folders` the folder
tools are not offered and say what they need (a direct call: NOT_FOUND, naming
the licence); with it they act on n8n's folders."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import httpx
import pytest

from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from instance_ai_cli import n8n_local
from server.api.caller import PROJECT_KEY, PROJECTS_KEY
from server.settings import Settings
from tests.conftest import serving
from tests.n8n_fixtures import N8nApi
from tests.tool_client import ToolClient
from tests.waiting import until

FOLDER_ACTIONS = {
    a: "always_allow" for a in ("createFolder", "deleteFolder", "moveWorkflowToFolder")
}


@pytest.fixture(scope="module")
def licensable_n8n(tmp_path_factory: pytest.TempPathFactory) -> Iterator[n8n_local.LocalN8n]:
    running = n8n_local.start(
        n8n_local.install(), tmp_path_factory.mktemp("n8n-e2e"), extra_env={"E2E_TESTS": "true"}
    )
    try:
        yield running
    finally:
        running.stop()


async def license_folders(n8n: n8n_local.LocalN8n, enabled: bool) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.patch(
            f"{n8n.url}/rest/e2e/feature", json={"feature": "feat:folders", "enabled": enabled}
        )
    answer.raise_for_status()


async def offered(channel: grpc.aio.Channel, tool: str) -> tools_pb2.ToolInfo:
    listed = await tools_pb2_grpc.ToolsStub(channel).ListTools(
        tools_pb2.ListToolsRequest(include_unavailable=True)
    )
    found: tools_pb2.ToolInfo = next(t for t in listed.tools if t.name == tool)
    return found


async def until_offered(channel: grpc.aio.Channel, tool: str, available: bool) -> None:
    async def as_wanted() -> bool:
        return (await offered(channel, tool)).available == available

    await until(as_wanted, f"{tool} {'available' if available else 'unavailable'}", every_s=0.1)


async def test_folders_follow_the_n8n_licence(
    make_settings: Callable[..., Settings], licensable_n8n: n8n_local.LocalN8n
) -> None:
    api = N8nApi(licensable_n8n)
    workflow = await api.call(
        "POST",
        "/workflows",
        {"name": "to file away", "nodes": [], "connections": {}, "settings": {}},
    )
    # The owner's own project in n8n, as the n8n backend sends it for its user.
    project = workflow["shared"][0]["projectId"]
    who = ((PROJECT_KEY, project), (PROJECTS_KEY, project))
    settings = make_settings(
        instance="n8n",
        n8n_url=licensable_n8n.url,
        n8n_api_key=licensable_n8n.api_key,
        n8n_probe_seconds=0.1,
        permissions=FOLDER_ACTIONS,
    )
    async with serving(settings) as (_app, channel):
        tools = ToolClient(channel, "folders", who)

        # No licence: not offered, and saying why; a call is refused, not crashed.
        listing = await offered(channel, "list-folders")
        assert not listing.available and "feat:folders" in listing.requires
        refused = await tools.refused("list-folders")
        assert refused.code() is grpc.StatusCode.NOT_FOUND
        assert "feat:folders" in str(refused.details())

        # Licensed while the service runs: found out, and the tools act on n8n's folders.
        await license_folders(licensable_n8n, True)
        await until_offered(channel, "list-folders", True)
        reports = await tools.call("create-folder", name="Reports")
        monthly = await tools.call("create-folder", name="Monthly", parentFolderId=reports["id"])
        in_n8n = await api.call("GET", f"/projects/{project}/folders")
        assert {f["name"]: f["parentFolderId"] for f in in_n8n["data"]} == {
            "Reports": None,
            "Monthly": reports["id"],
        }
        listed = await tools.call("list-folders")
        assert [(f["name"], f.get("parentFolderId")) for f in listed["folders"]] == [
            ("Monthly", reports["id"]),
            ("Reports", None),
        ]
        await tools.call(
            "move-workflow-to-folder", workflowId=workflow["id"], folderId=monthly["id"]
        )
        held = await api.call("GET", f"/projects/{project}/folders/{monthly['id']}")
        assert held["totalWorkflows"] == 1
        gone = await tools.refused("delete-folder", folderId="no-such-folder")
        assert gone.code() is grpc.StatusCode.NOT_FOUND

        # Without a transfer target, n8n archives what the folder held.
        deleted = await tools.call("delete-folder", folderId=reports["id"])
        assert deleted == {"success": True, "affectedWorkflows": 1}
        assert (await api.call("GET", f"/projects/{project}/folders"))["data"] == []
        assert (await api.call("GET", f"/workflows/{workflow['id']}"))["isArchived"] is True

        # The standalone default project: n8n names it only for creating.
        standalone = ToolClient(channel, "folders")
        inbox = await standalone.call("create-folder", name="Inbox")
        names = [f["name"] for f in (await tools.call("list-folders"))["folders"]]
        assert names == ["Inbox"] and inbox["name"] == "Inbox"
        unnamed = await standalone.refused("list-folders")
        assert unnamed.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "projectId" in str(unnamed.details())

        # The licence lapses: the tools go away again.
        await license_folders(licensable_n8n, False)
        await until_offered(channel, "list-folders", False)
        lapsed = await tools.refused("create-folder", name="Late")
        assert lapsed.code() is grpc.StatusCode.NOT_FOUND
