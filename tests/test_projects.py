"""Project isolation: the caller's user and projects come in gRPC metadata, and another
project's objects answer exactly as if they did not exist."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from instance_ai.v1 import agent_pb2, agent_pb2_grpc, tools_pb2, tools_pb2_grpc
from server.api.convert import from_struct, to_struct
from server.app import Application
from server.domain.workflows import WorkflowContent
from server.settings import Settings
from tests.agent_fixtures import Chat, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool

__all__ = ["model"]  # fixtures, shared

ALLOW = {a: "always_allow" for a in ("createDataTable", "deleteWorkflow", "publishWorkflow")}


def as_user(user: str, project: str, *projects: str) -> tuple[tuple[str, str], ...]:
    return (
        ("x-instance-ai-user", user),
        ("x-instance-ai-project", project),
        ("x-instance-ai-projects", ",".join([project, *projects])),
    )


ALICE = as_user("alice", "team-a")
BOB = as_user("bob", "team-b")
CAROL = as_user("carol", "team-b", "team-a")  # in both


class Tools:
    def __init__(self, app: Application, channel: grpc.aio.Channel) -> None:
        self.app = app
        self.stub = tools_pb2_grpc.ToolsStub(channel)

    async def call(self, who: Any, tool_name: str, **arguments: Any) -> dict[str, Any]:
        response = await self.stub.CallTool(
            tools_pb2.CallToolRequest(
                thread_id="p1", tool_name=tool_name, arguments=to_struct(arguments)
            ),
            metadata=who,
        )
        return from_struct(response.result)

    async def missing(self, who: Any, tool_name: str, **arguments: Any) -> str:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await self.call(who, tool_name, **arguments)
        assert error.value.code() is grpc.StatusCode.NOT_FOUND, error.value.details()
        return error.value.details() or ""


@pytest.fixture
async def tools(make_settings: Callable[..., Settings]) -> AsyncIterator[Tools]:
    async with serving(make_settings(permissions=ALLOW)) as (app, channel):
        yield Tools(app, channel)


async def save_workflow(app: Application, project: str) -> str:
    await app.runtime.events.append("p1", "note", {})
    saved = await app.runtime.workflows.save_from_source(
        thread_id="p1",
        file_path=f"src/{project}.workflow.ts",
        source_hash=project,
        content=WorkflowContent(name=f"{project} flow", nodes=[], connections={}, settings={}),
        workflow_id=None,
        project_id=project,
    )
    return saved.id


async def test_workflows_of_another_project_do_not_exist(tools: Tools) -> None:
    workflow = await save_workflow(tools.app, "team-a")
    assert (await tools.call(ALICE, "get-workflow", workflowId=workflow))["name"] == "team-a flow"
    nowhere = await tools.missing(BOB, "get-workflow", workflowId="no-such-id")
    elsewhere = await tools.missing(BOB, "get-workflow", workflowId=workflow)
    assert elsewhere == nowhere.replace("no-such-id", workflow)  # the same answer
    assert (await tools.call(BOB, "list-workflows"))["workflows"] == []
    assert [w["id"] for w in (await tools.call(CAROL, "list-workflows"))["workflows"]] == [workflow]
    await tools.missing(BOB, "delete-workflow", workflowId=workflow)
    await tools.missing(BOB, "publish-workflow", workflowId=workflow)
    await tools.missing(BOB, "verify-built-workflow", workflowId=workflow)
    # Listing answers as for an unknown workflow: nothing.
    await tools.app.runtime.executions.start(
        workflow_id=workflow, version_id="v", thread_id="p1", mode="manual", trigger_node=None
    )
    assert (await tools.call(BOB, "list-executions", workflowId=workflow))["executions"] == []
    assert (await tools.call(BOB, "list-executions", workflowId="nope"))["executions"] == []
    assert len((await tools.call(ALICE, "list-executions", workflowId=workflow))["executions"]) == 1
    assert (await tools.call(ALICE, "get-workflow", workflowId=workflow))["isArchived"] is False


async def test_data_tables_of_another_project_do_not_exist(tools: Tools) -> None:
    created = await tools.call(
        ALICE, "create-data-table", name="leads", columns=[{"name": "email", "type": "string"}]
    )
    table = created["table"]
    assert table["projectId"] == "team-a"
    assert (await tools.call(BOB, "list-data-tables"))["tables"] == []
    said = await tools.missing(BOB, "get-data-table-schema", dataTableId=table["id"])
    assert said == f"there is no data table {table['id']!r}; list-data-tables names them"
    await tools.missing(BOB, "query-data-table-rows", dataTableId=table["id"])
    # Bob can make his own "leads": names are per project.
    await tools.call(
        BOB, "create-data-table", name="leads", columns=[{"name": "email", "type": "string"}]
    )
    await tools.missing(
        BOB,
        "create-data-table",
        name="x",
        projectId="team-a",
        columns=[{"name": "a", "type": "string"}],
    )
    both = await tools.call(CAROL, "list-data-tables")
    assert sorted(t["projectId"] for t in both["tables"]) == ["team-a", "team-b"]
    projects = await tools.call(CAROL, "list-projects")
    assert projects == {
        "projects": [{"id": "team-a", "isDefault": False}, {"id": "team-b", "isDefault": True}]
    }


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ((("x-instance-ai-project", "a"), ("x-instance-ai-projects", "b,c")), "not among"),
        ((("x-instance-ai-user", "bad user!"),), "is not an id"),
    ],
)
async def test_bad_caller_metadata_is_refused(
    tools: Tools, metadata: tuple[tuple[str, str], ...], says: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await tools.call(metadata, "list-projects")
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
        card = await Chat(channel).card("shared")
        answer = agent_pb2.ConfirmRequest(
            thread_id="shared",
            request_id=card["requestId"],
            resume=to_struct({"kind": "approval", "approved": True}),
        )
        with pytest.raises(grpc.aio.AioRpcError) as stranger:
            await agent.Confirm(answer, metadata=BOB)
        assert stranger.value.code() is grpc.StatusCode.NOT_FOUND
        confirmed = await agent.Confirm(answer, metadata=ALICE)
        assert confirmed.run_id == sent.run_id
        await Chat(channel).finished("shared", sent.run_id)
