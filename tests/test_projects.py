"""Project isolation: the caller's user and projects come in gRPC metadata, and another
project's objects answer exactly as if they did not exist."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from instance_ai.json_text import to_json
from instance_ai.v1 import agent_pb2, agent_pb2_grpc, credentials_pb2, credentials_pb2_grpc
from server.app import Application
from server.domain.credential_store import CredentialStore
from server.settings import Settings
from server.wiring import credential_store
from tests.agent_fixtures import Chat, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.tool_client import Metadata, ToolClient, saved_workflow

__all__ = ["model"]  # fixtures, shared

ALLOW = {
    a: "always_allow"
    for a in (
        "createDataTable",
        "deleteWorkflow",
        "publishWorkflow",
        "deleteCredential",
        "createFolder",
        "deleteFolder",
        "moveWorkflowToFolder",
    )
}


def embedded_store(app: Application) -> CredentialStore:
    """The embedded store behind the instance, for what only it offers (reveal, rekey)."""
    return credential_store(app.settings, app.parts.db)


def as_user(user: str, project: str, *projects: str) -> tuple[tuple[str, str], ...]:
    return (
        ("x-instance-ai-user", user),
        ("x-instance-ai-project", project),
        ("x-instance-ai-projects", ",".join([project, *projects])),
    )


ALICE = as_user("alice", "team-a")
BOB = as_user("bob", "team-b")
CAROL = as_user("carol", "team-b", "team-a")  # in both


class Tools(ToolClient):
    def __init__(self, app: Application, channel: grpc.aio.Channel) -> None:
        super().__init__(channel, "p1")
        self.app = app
        self.credentials = credentials_pb2_grpc.CredentialsStub(channel)

    async def call_as(self, who: Metadata, tool_name: str, **arguments: Any) -> dict[str, Any]:
        return await self.as_caller(who).call(tool_name, **arguments)

    async def missing(self, who: Metadata, tool_name: str, **arguments: Any) -> str:
        error = await self.as_caller(who).refused(tool_name, **arguments)
        assert error.code() is grpc.StatusCode.NOT_FOUND, error.details()
        return error.details() or ""


@pytest.fixture
async def tools(make_settings: Callable[..., Settings]) -> AsyncIterator[Tools]:
    async with serving(make_settings(permissions=ALLOW)) as (app, channel):
        yield Tools(app, channel)


async def test_workflows_of_another_project_do_not_exist(tools: Tools) -> None:
    workflow = await saved_workflow(tools.app, "p1", "team-a flow", project_id="team-a")
    assert (await tools.call_as(ALICE, "get-workflow", workflowId=workflow))[
        "name"
    ] == "team-a flow"
    nowhere = await tools.missing(BOB, "get-workflow", workflowId="no-such-id")
    elsewhere = await tools.missing(BOB, "get-workflow", workflowId=workflow)
    assert elsewhere == nowhere.replace("no-such-id", workflow)  # the same answer
    assert (await tools.call_as(BOB, "list-workflows"))["workflows"] == []
    assert [w["id"] for w in (await tools.call_as(CAROL, "list-workflows"))["workflows"]] == [
        workflow
    ]
    await tools.missing(BOB, "delete-workflow", workflowId=workflow)
    await tools.missing(BOB, "publish-workflow", workflowId=workflow)
    await tools.missing(BOB, "verify-built-workflow", workflowId=workflow)
    # Listing answers as for an unknown workflow: nothing.
    await tools.app.parts.instance.executions.start(
        workflow_id=workflow, version_id="v", thread_id="p1", mode="manual", trigger_node=None
    )
    assert (await tools.call_as(BOB, "list-executions", workflowId=workflow))["executions"] == []
    assert (await tools.call_as(BOB, "list-executions", workflowId="nope"))["executions"] == []
    assert (
        len((await tools.call_as(ALICE, "list-executions", workflowId=workflow))["executions"]) == 1
    )
    assert (await tools.call_as(ALICE, "get-workflow", workflowId=workflow))["isArchived"] is False


async def test_data_tables_of_another_project_do_not_exist(tools: Tools) -> None:
    created = await tools.call_as(
        ALICE, "create-data-table", name="leads", columns=[{"name": "email", "type": "string"}]
    )
    table = created["table"]
    assert table["projectId"] == "team-a"
    assert (await tools.call_as(BOB, "list-data-tables"))["tables"] == []
    said = await tools.missing(BOB, "get-data-table-schema", dataTableId=table["id"])
    assert said == f"there is no data table {table['id']!r}; list-data-tables names them"
    await tools.missing(BOB, "query-data-table-rows", dataTableId=table["id"])
    # Bob can make his own "leads": names are per project.
    await tools.call_as(
        BOB, "create-data-table", name="leads", columns=[{"name": "email", "type": "string"}]
    )
    await tools.missing(
        BOB,
        "create-data-table",
        name="x",
        projectId="team-a",
        columns=[{"name": "a", "type": "string"}],
    )
    both = await tools.call_as(CAROL, "list-data-tables")
    assert sorted(t["projectId"] for t in both["tables"]) == ["team-a", "team-b"]
    projects = await tools.call_as(CAROL, "list-projects")
    assert projects == {
        "projects": [{"id": "team-a", "isDefault": False}, {"id": "team-b", "isDefault": True}]
    }


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ((("x-instance-ai-project", "a"), ("x-instance-ai-projects", "b,c")), "not among"),
        ((("x-instance-ai-user", "bad user!"),), "is not an id"),
        ((("x-instance-ai-project", "instance"),), "is reserved"),
    ],
)
async def test_bad_caller_metadata_is_refused(
    tools: Tools, metadata: tuple[tuple[str, str], ...], says: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await tools.call_as(metadata, "list-projects")
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert says in (error.value.details() or "")


async def test_only_the_user_whose_run_asked_may_answer_its_card(
    make_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(tool("run-workflow", {"workflowId": "wf-x"}), text("done"))
    async with serving(make_settings(**with_model(model))) as (_app, channel):
        agent = agent_pb2_grpc.AgentStub(channel)
        sent = await agent.SendMessage(
            agent_pb2.SendMessageRequest(thread_id="shared", message="run it"), metadata=ALICE
        )
        card = await Chat(channel, ALICE).card("shared")
        answer = agent_pb2.ConfirmRequest(
            thread_id="shared",
            request_id=card["requestId"],
            resume_json=to_json({"kind": "approval", "approved": True}),
        )
        with pytest.raises(grpc.aio.AioRpcError) as stranger:
            await agent.Confirm(answer, metadata=BOB)
        assert stranger.value.code() is grpc.StatusCode.PERMISSION_DENIED
        confirmed = await agent.Confirm(answer, metadata=ALICE)
        assert confirmed.run_id == sent.run_id
        await Chat(channel, ALICE).finished("shared", sent.run_id)


async def test_credentials_and_folders_of_another_project_do_not_exist(tools: Tools) -> None:
    stub = tools.credentials
    created = await stub.CreateCredential(
        credentials_pb2.CreateCredentialRequest(
            name="Team A Slack", type="slackApi", data_json=to_json({"accessToken": "xoxb-a"})
        ),
        metadata=ALICE,
    )
    credential = created.credential.id
    assert (await tools.call_as(BOB, "list-credentials"))["credentials"] == []
    await tools.missing(BOB, "get-credential", credentialId=credential)
    await tools.missing(BOB, "delete-credential", credentialId=credential)
    with pytest.raises(grpc.aio.AioRpcError) as update:
        await stub.UpdateCredential(
            credentials_pb2.UpdateCredentialRequest(
                credential_id=credential, data_json=to_json({"accessToken": "xoxb-bob"})
            ),
            metadata=BOB,
        )
    assert update.value.code() is grpc.StatusCode.NOT_FOUND
    assert await embedded_store(tools.app).reveal(credential) == {"accessToken": "xoxb-a"}
    assert (await tools.call_as(ALICE, "get-credential", credentialId=credential))["name"] == (
        "Team A Slack"
    )

    folder = (await tools.call_as(ALICE, "create-folder", name="Sales"))["id"]
    assert (await tools.call_as(BOB, "list-folders"))["folders"] == []
    await tools.missing(BOB, "delete-folder", folderId=folder)
    await tools.missing(BOB, "create-folder", name="inside", parentFolderId=folder)
    workflow = await saved_workflow(tools.app, "p1", "bob flow", project_id="team-b")
    await tools.missing(BOB, "move-workflow-to-folder", workflowId=workflow, folderId=folder)
    listed = await tools.call_as(ALICE, "list-folders")
    assert [f["id"] for f in listed["folders"]] == [folder]
