"""Folders, tags and test-execution cleanup through `Tools.CallTool`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from sqlalchemy import update

from server.app import Application
from server.settings import Settings
from server.store.models import ExecutionRow, WorkflowRow
from tests.conftest import serving
from tests.tool_client import ToolClient, saved_workflow

ALLOW = {
    a: "always_allow"
    for a in (
        "tagWorkflow",
        "createFolder",
        "deleteFolder",
        "moveWorkflowToFolder",
        "cleanupTestExecutions",
    )
}


class Client(ToolClient):
    def __init__(self, app: Application, channel: grpc.aio.Channel) -> None:
        super().__init__(channel, "org")
        self.app = app

    async def workflow(self, name: str) -> str:
        return await saved_workflow(self.app, "org", name)

    async def folder_of(self, workflow_id: str) -> str | None:
        async with self.app.parts.db.session() as session:
            row = await session.get(WorkflowRow, workflow_id)
            assert row is not None
            return row.folder_id


@pytest.fixture
async def client(make_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
    async with serving(make_settings(permissions=ALLOW)) as (app, channel):
        yield Client(app, channel)


async def test_folders_nest_hold_workflows_and_delete_both_ways(client: Client) -> None:
    ops = await client.call("create-folder", name="Ops")
    nightly = await client.call("create-folder", name="Nightly", parentFolderId=ops["id"])
    archive = await client.call("create-folder", name="Archive")
    assert nightly["parentFolderId"] == ops["id"] and ops["projectId"] == "personal"
    listed = await client.call("list-folders")
    assert [f["name"] for f in listed["folders"]] == ["Archive", "Nightly", "Ops"]

    backup, report = await client.workflow("backup"), await client.workflow("report")
    await client.call("move-workflow-to-folder", workflowId=backup, folderId=nightly["id"])
    await client.call("move-workflow-to-folder", workflowId=report, folderId=ops["id"])
    assert await client.folder_of(backup) == nightly["id"]

    moved = await client.call("delete-folder", folderId=ops["id"], transferToFolderId=archive["id"])
    assert moved == {"success": True, "affectedWorkflows": 1}
    assert await client.folder_of(report) == archive["id"]
    left = {f["name"]: f for f in (await client.call("list-folders"))["folders"]}
    assert set(left) == {"Archive", "Nightly"}
    assert left["Nightly"]["parentFolderId"] == archive["id"]  # the subfolder moved too

    flattened = await client.call("delete-folder", folderId=archive["id"])
    assert flattened == {"success": True, "affectedWorkflows": 2}  # report + backup (nested)
    for workflow in (report, backup):
        assert await client.folder_of(workflow) is None
        assert (await client.call("get-workflow", workflowId=workflow))["isArchived"] is True
    assert (await client.call("list-folders"))["folders"] == []

    missing = await client.refused("move-workflow-to-folder", workflowId=report, folderId="nope")
    assert missing.code() is grpc.StatusCode.NOT_FOUND and "list-folders" in (
        missing.details() or ""
    )
    inside = await client.call("create-folder", name="In")
    child = await client.call("create-folder", name="Child", parentFolderId=inside["id"])
    loop = await client.refused(
        "delete-folder", folderId=inside["id"], transferToFolderId=child["id"]
    )
    assert loop.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_tags_are_replaced_created_and_counted(client: Client) -> None:
    first, second = await client.workflow("a"), await client.workflow("b")
    applied = await client.call("tag-workflow", workflowId=first, tags=["crm", "nightly", "crm"])
    assert applied == {"appliedTags": ["crm", "nightly"]}
    await client.call("tag-workflow", workflowId=second, tags=["crm"])
    await client.call("tag-workflow", workflowId=first, tags=["billing"])  # replaces
    tags = {t["name"]: t["usageCount"] for t in (await client.call("list-tags"))["tags"]}
    assert tags == {"billing": 1, "crm": 1, "nightly": 0}
    empty = await client.refused("tag-workflow", workflowId=first, tags=[" "])
    assert empty.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_cleanup_removes_only_old_finished_test_runs(client: Client) -> None:
    workflow = await client.workflow("c")
    version = (await client.call("get-workflow", workflowId=workflow))["versionId"]
    executions = client.app.parts.instance.executions
    made: dict[str, str] = {}
    for label, mode, verification in [
        ("manual", "manual", False),
        ("verify", "webhook", True),
        ("live", "trigger", False),
        ("running", "manual", False),
        ("recent", "manual", False),
    ]:
        started = await executions.start(
            workflow_id=workflow,
            version_id=version,
            thread_id="org",
            mode=mode,
            trigger_node=None,
            is_verification=verification,
        )
        if label != "running":
            await executions.finish(started.id, status="success", result={}, error=None)
        made[label] = started.id
    old = datetime.now(UTC) - timedelta(hours=3)
    async with client.app.parts.db.session() as session, session.begin():
        await session.execute(
            update(ExecutionRow)
            .where(ExecutionRow.id.in_([v for k, v in made.items() if k != "recent"]))
            .values(started_at=old)
        )
    cleaned = await client.call("cleanup-test-executions", workflowId=workflow, olderThanHours=2)
    assert cleaned == {"deletedCount": 2}
    kept = {
        e["id"] for e in (await client.call("list-executions", workflowId=workflow))["executions"]
    }
    assert kept == {made["live"], made["running"], made["recent"]}
