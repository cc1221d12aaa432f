"""The read tools n8n's assistant has beside the build (issue 37), over real gRPC:
validate-workflow (a source compiled and checked in the sandbox, nothing saved; a saved
workflow with its last run), get-node-usage, get-resolved-parameters (a past run's expressions
replayed on the sandbox's engine), instance-activity (the embedded instance's log, as the
fronts' callers made the changes), conversation-history (a person's other threads, driven by
the agent), and verify-built-workflow's includeData, maxDataChars, fixTargetNodeNames and
allowZeroItemFixtures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from instance_ai.json_text import to_json
from instance_ai.metadata import PROJECT_KEY, PROJECTS_KEY, USER_KEY
from instance_ai.v1 import credentials_pb2, credentials_pb2_grpc
from server.app import Application
from server.instance.types import WorkflowContent
from server.settings import Settings
from server.tools import activity
from server.tools.registry import ToolRegistry
from tests.agent_fixtures import Chat, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.test_build import ROOT, WORKFLOWS
from tests.test_build import Client as BuildClient
from tests.tool_client import Metadata, ToolClient

__all__ = ["model"]  # fixtures, shared


def who(user: str, project: str = "p1", *projects: str) -> Metadata:
    return (
        (USER_KEY, user),
        (PROJECT_KEY, project),
        (PROJECTS_KEY, ",".join([project, *projects])),
    )


ALICE = who("alice", "p1", "p2")
BOB = who("bob", "p1")


# -- validate-workflow, get-resolved-parameters, verify-built-workflow (the sandbox) ---------


class Built(BuildClient):
    """The build tests' client, plus a refused call."""

    async def refused(self, tool: str, **arguments: Any) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await self.call(tool, **arguments)
        return error.value


@pytest.fixture
async def built(make_docker_settings: Callable[..., Settings]) -> AsyncIterator[Built]:
    settings = make_docker_settings(permissions={"runWorkflow": "always_allow"})
    async with serving(settings) as (app, channel):
        yield Built(app, channel)


INTAKE = ROOT / "examples/order-intake.workflow.ts"


async def test_validate_workflow_checks_a_source_as_a_build_would_and_saves_nothing(
    built: Built,
) -> None:
    await built.write("src/intake.workflow.ts", INTAKE.read_text())
    checked = await built.call("validate-workflow", filePath="src/intake.workflow.ts")
    assert checked["success"] is True and checked["nodeCount"] == 5
    assert checked["filePath"] == "src/intake.workflow.ts" and checked["errors"] == []
    # No Slack credential of the user's: a build would leave Announce mocked, so it is flagged.
    assert checked["mockedNodeNames"] == ["Announce"]
    assert set(checked["issues"]) == {"Announce"}
    assert checked["issues"]["Announce"]["credentials"]
    assert checked["summary"][0].startswith("Announce: credentials.")
    assert checked["valid"] is False
    quiet = await built.call(
        "validate-workflow", filePath="src/intake.workflow.ts", ignoreIssues=["credentials"]
    )
    assert quiet["valid"] is True and quiet["issues"] == {} and quiet["summary"] == []

    await built.write(
        "src/broken.workflow.ts", (WORKFLOWS / "catalog-errors.workflow.ts").read_text()
    )
    broken = await built.call("validate-workflow", filePath="src/broken.workflow.ts")
    assert broken["success"] is False and broken["valid"] is False
    codes = {(e["code"], e.get("nodeName")) for e in broken["errors"]}
    assert ("UNKNOWN_NODE_TYPE", "Ghost") in codes and ("UNKNOWN_NODE_VERSION", "Old Set") in codes
    assert broken["issues"]["Ghost"] == {"typeUnknown": True}
    assert "Ghost: typeUnknown: Unknown node type" in broken["summary"]
    assert "githubApi" in broken["issues"]["Chat"]["credentials"]
    assert "nodeCount" not in broken  # it did not compile to a workflow that passed
    assert any(w["code"] == "DEPRECATED_NODE_TYPE" for w in broken["warnings"])
    narrowed = await built.call(
        "validate-workflow", filePath="src/broken.workflow.ts", ignoreIssues=["typeUnknown"]
    )
    assert "Ghost" not in narrowed["issues"] and narrowed["success"] is False

    # The same compile as the build: a file that does not load fails in the load layer.
    await built.write("src/nothing.workflow.ts", "export const x = 1;\n")
    unloaded = await built.call("validate-workflow", filePath="src/nothing.workflow.ts")
    assert unloaded["success"] is False and unloaded["errors"][0]["source"] == "export"
    assert await built.workflows() == []  # nothing was saved by any of it

    for arguments in ({}, {"filePath": "src/a.ts", "workflowId": "w"}):
        refused = await built.refused("validate-workflow", **arguments)
        assert refused.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_validate_a_saved_workflow_with_its_pinned_nodes_and_its_last_run(
    built: Built,
) -> None:
    await built.write("src/intake.workflow.ts", INTAKE.read_text())
    saved = await built.build("src/intake.workflow.ts")
    assert saved.success, saved.errors
    workflow_id = saved.workflow_id
    fresh = await built.call("validate-workflow", workflowId=workflow_id)
    assert fresh["success"] is True and fresh["nodeCount"] == 5
    assert fresh["pinnedNodes"] == [{"nodeName": "Order Intake", "itemCount": 1}]
    assert "run-workflow" in fresh["pinnedDataNote"]
    assert "execution" not in json.dumps(fresh["issues"])

    ran = await built.call(
        "run-workflow",
        workflowId=workflow_id,
        inputData={"body": {"orderId": "B-2", "amount": 5000}},
    )
    assert ran["status"] == "error"
    after = await built.call("validate-workflow", workflowId=workflow_id)
    assert after["issues"]["Announce"]["execution"] is True
    line = next(s for s in after["summary"] if s.startswith("Announce: execution:"))
    assert "A previous execution of this node failed: " in line and "credential" in line
    assert after["valid"] is False and after["success"] is True
    ignored = await built.call(
        "validate-workflow", workflowId=workflow_id, ignoreIssues=["execution"]
    )
    assert "Announce" not in ignored["issues"]

    # A credential a node names that the user has none of.
    await built.app.parts.instance.workflows.replace_credentials(
        workflow_id, {"Announce": {"slackApi": {"id": "gone", "name": "Old Slack"}}}
    )
    named = await built.call(
        "validate-workflow", workflowId=workflow_id, ignoreIssues=["execution"]
    )
    assert named["issues"]["Announce"]["credentials"]["slackApi"] == [
        "Credentials with name Old Slack do not exist for slackApi: choose one of the user's "
        "(setup-workflow) or create one"
    ]
    missing = await built.refused("validate-workflow", workflowId="nope")
    assert missing.code() is grpc.StatusCode.NOT_FOUND


RESOLVE = {
    "name": "Resolve",
    "nodes": [
        {
            "name": "Start",
            "type": "n8n-nodes-base.manualTrigger",
            "typeVersion": 1,
            "position": [0, 0],
            "parameters": {},
        },
        {
            "name": "Seed",
            "type": "n8n-nodes-base.code",
            "typeVersion": 2,
            "position": [200, 0],
            "parameters": {
                "jsCode": "return [{json: {a: 1, b: 2, email: 'a@b.c'}}, {json: {a: 10, b: 20}}];"
            },
        },
        {
            "name": "Shape",
            "type": "n8n-nodes-base.set",
            "typeVersion": 3.4,
            "position": [400, 0],
            "parameters": {
                "mode": "manual",
                "assignments": {
                    "assignments": [
                        {
                            "id": "t",
                            "name": "total",
                            "value": "={{ $json.a + $json.b }}",
                            "type": "number",
                        },
                        {
                            "id": "m",
                            "name": "mail",
                            "value": "={{ $json.email || '' }}",
                            "type": "string",
                        },
                    ]
                },
                "options": {},
            },
        },
        {
            "name": "Notify",
            "type": "n8n-nodes-base.set",
            "typeVersion": 3.4,
            "position": [600, 0],
            "parameters": {
                "mode": "manual",
                "assignments": {
                    "assignments": [
                        {"id": "to", "name": "to", "value": "={{ $json.mail }}", "type": "string"},
                        {
                            "id": "l",
                            "name": "label",
                            "value": "=Total {{ $json.total }} of {{ $('Seed').item.json.a }}",
                            "type": "string",
                        },
                        {
                            "id": "x",
                            "name": "broken",
                            "value": "={{ $('Nope').item.json.x }}",
                            "type": "string",
                        },
                    ]
                },
                "options": {},
            },
        },
    ],
    "connections": {
        "Start": {"main": [[{"node": "Seed", "type": "main", "index": 0}]]},
        "Seed": {"main": [[{"node": "Shape", "type": "main", "index": 0}]]},
        "Shape": {"main": [[{"node": "Notify", "type": "main", "index": 0}]]},
    },
}


async def test_resolved_parameters_replay_a_failed_runs_expressions(built: Built) -> None:
    await built.write("src/resolve.json", json.dumps(RESOLVE))
    saved = await built.build("src/resolve.json")
    assert saved.success, saved.errors
    ran = await built.call("run-workflow", workflowId=saved.workflow_id)
    assert ran["status"] == "error" and "Nope" not in ran.get("data", {})
    execution = ran["executionId"]

    second = await built.call(
        "get-resolved-parameters", executionId=execution, nodeName="Notify", itemIndex=1
    )
    assert (second["nodeName"], second["itemIndex"], second["runIndex"]) == ("Notify", 1, 0)
    raw = second["parameters"]["assignments"]["assignments"]
    assert raw[1]["value"] == "=Total {{ $json.total }} of {{ $('Seed').item.json.a }}"
    resolved = json.loads(second["resolved"])["assignments"]["assignments"]
    # Item 1 of the record, its pairing followed back to Seed.
    assert resolved[1]["value"] == "Total 30 of 10"
    assert resolved[2]["value"] is None
    assert second["emptyResolutions"] == [
        {"path": "assignments.assignments[0].value", "raw": "={{ $json.mail }}", "resolved": ""}
    ]
    [failed] = second["failedExpressions"]
    assert failed["path"] == "assignments.assignments[2].value"
    assert failed["reason"] == "expression-error" and "doesn't exist" in failed["error"]

    first = await built.call("get-resolved-parameters", executionId=execution, nodeName="Notify")
    resolved = json.loads(first["resolved"])["assignments"]["assignments"]
    assert [resolved[0]["value"], resolved[1]["value"]] == ["a@b.c", "Total 3 of 1"]
    assert first["emptyResolutions"] == []
    shape = await built.call(
        "get-resolved-parameters", executionId=execution, nodeName="Shape", itemIndex=1
    )
    assert json.loads(shape["resolved"])["assignments"]["assignments"][0]["value"] == 30

    wrong_run = await built.refused(
        "get-resolved-parameters", executionId=execution, nodeName="Notify", runIndex=2
    )
    assert wrong_run.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "runIndex 0" in (wrong_run.details() or "")
    unknown = await built.refused("get-resolved-parameters", executionId=execution, nodeName="Nope")
    assert unknown.code() is grpc.StatusCode.NOT_FOUND
    assert "Notify" in (unknown.details() or "")


async def test_verify_carries_data_previews_fix_targets_and_zero_item_fixtures(
    built: Built,
) -> None:
    await built.write("src/intake.workflow.ts", INTAKE.read_text())
    saved = await built.build("src/intake.workflow.ts")
    workflow_id = saved.workflow_id
    plain = await built.call("verify-built-workflow", workflowId=workflow_id)
    assert plain["success"] is True and "data" not in plain
    previews = {p["nodeName"]: p for p in plain["nodePreviews"]}
    assert not previews["Prioritise"]["truncated"]
    assert json.loads(previews["Prioritise"]["preview"])[0]["orderId"] == "A-7"
    # An If node's two outputs: each counted, the preview shows both.
    assert previews["Urgent?"]["outputs"] == [
        {"index": 0, "itemCount": 1},
        {"index": 1, "itemCount": 0},
    ]

    detailed = await built.call(
        "verify-built-workflow", workflowId=workflow_id, includeData=True, maxDataChars=20
    )
    for preview in detailed["nodePreviews"]:
        assert len(preview["preview"]) <= 23
        assert preview["truncated"] is (preview["chars"] > 20)
        if preview["truncated"]:
            assert preview["preview"].endswith("...")
    data = detailed["data"]
    assert data["Prioritise"][0]["urgent"] is True and data["Prioritise"][0]["orderId"] == "A-7"
    assert data["Urgent?"]["totalItems"] == 1 and data["Urgent?"]["outputs"][1]["items"] == []
    assert "Queue" not in data  # it did not run (the order is urgent)
    blank = await built.call("verify-built-workflow", workflowId=workflow_id, maxDataChars=0)
    assert all(p["preview"] == "" and p["truncated"] for p in blank["nodePreviews"])

    # A second workflow (its own work item: each may be verified five times).
    await built.write("src/intake-2.workflow.ts", INTAKE.read_text())
    workflow_id = (await built.build("src/intake-2.workflow.ts")).workflow_id
    # Queue is the node "being fixed", but this run never reaches it: not proven.
    targeted = await built.call(
        "verify-built-workflow", workflowId=workflow_id, fixTargetNodeNames=["Queue"]
    )
    assert targeted["claim"]["level"] == "unproven"
    assert targeted["claim"]["unprovenTargets"] == ["Queue"]
    reached = await built.call(
        "verify-built-workflow", workflowId=workflow_id, fixTargetNodeNames=["Prioritise"]
    )
    assert reached["claim"]["level"] == "partial" and reached["claim"]["unprovenTargets"] == []

    empty = await built.call(
        "verify-built-workflow", workflowId=workflow_id, fixtureOverrides={"Announce": []}
    )
    assert empty["success"] is False and empty["status"] == "not_run"
    assert empty["remediation"]["reason"] == "zero_item_fixture_override"
    assert "allowZeroItemFixtures" in empty["guidance"]
    other = await built.call(
        "verify-built-workflow",
        workflowId=workflow_id,
        fixtureOverrides={"Announce": []},
        allowZeroItemFixtures=["Queue"],
    )
    assert other["status"] == "not_run"  # allowing another node allows nothing here
    allowed = await built.call(
        "verify-built-workflow",
        workflowId=workflow_id,
        fixtureOverrides={"Announce": []},
        allowZeroItemFixtures=["Announce"],
    )
    assert allowed["success"] is True and allowed["executionId"]
    announce = next(p for p in allowed["nodePreviews"] if p["nodeName"] == "Announce")
    assert announce["itemCount"] == 0 and announce["simulated"] is True


# -- get-node-usage ----------------------------------------------------------------------------


def nodes(*types: str) -> list[dict[str, Any]]:
    return [{"name": f"N{i}", "type": t, "parameters": {}} for i, t in enumerate(types)]


async def save(
    app: Application, name: str, project: str, *types: str, workflow_id: str | None = None
) -> str:
    saved = await app.parts.instance.workflows.save_from_source(
        thread_id="usage",
        file_path=f"src/{name}.json",
        source_hash=name,
        content=WorkflowContent(name=name, nodes=nodes(*types), connections={}, settings={}),
        workflow_id=workflow_id,
        project_id=project,
    )
    return saved.id


SLACK = "n8n-nodes-base.slack"
HTTP = "n8n-nodes-base.httpRequest"
MANUAL = "n8n-nodes-base.manualTrigger"


async def test_node_usage_counts_workflows_per_type_in_scope(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings(permissions={"deleteWorkflow": "always_allow"})) as (
        app,
        channel,
    ):
        await app.parts.events.append("usage", "thread-title-updated", {"title": "usage"})
        alerts = await save(app, "Alerts", "p1", MANUAL, SLACK, SLACK)
        await asyncio.sleep(0.01)
        sync = await save(app, "Sync", "p1", MANUAL, HTTP, SLACK)
        await asyncio.sleep(0.01)
        fetch = await save(app, "Fetch", "p1", MANUAL, HTTP)
        await save(app, "Elsewhere", "p2", HTTP)
        await save(app, "Hidden", "p3", SLACK)  # a project alice is not in
        gone = await save(app, "Gone", "p1", SLACK)
        alice = ToolClient(channel, "usage-alice", ALICE)
        await alice.call("delete-workflow", workflowId=gone)  # archived: out of scope

        overview = await alice.call("get-node-usage")
        assert overview["workflowsInScope"] == 3
        assert overview["nodeTypes"] == [
            {"nodeType": MANUAL, "workflowCount": 3},
            {"nodeType": HTTP, "workflowCount": 2},  # ties by name
            {"nodeType": SLACK, "workflowCount": 2},  # Alerts has two Slack nodes: one workflow
        ]
        assert "truncated" not in overview and "used by no workflow" in overview["note"]
        cut = await alice.call("get-node-usage", limit=1)
        assert cut["truncated"] is True and len(cut["nodeTypes"]) == 1
        assert "do not take its absence as evidence" in cut["note"]

        users = await alice.call("get-node-usage", nodeType=SLACK)
        assert [w["workflowId"] for w in users["workflows"]] == [sync, alerts]  # newest first
        assert users["nodeType"] == SLACK and users["workflowsInScope"] == 3
        first = await alice.call("get-node-usage", nodeType=HTTP, limit=1)
        assert [w["workflowId"] for w in first["workflows"]] == [fetch] and first["truncated"]

        everywhere = await alice.call("get-node-usage", scope="instance")
        assert everywhere["workflowsInScope"] == 4  # p1 and p2, never p3
        assert {"nodeType": HTTP, "workflowCount": 3} in everywhere["nodeTypes"]
        other = await alice.call("get-node-usage", projectId="p2")
        assert other["nodeTypes"] == [{"nodeType": HTTP, "workflowCount": 1}]
        unused = await alice.call("get-node-usage", nodeType="n8n-nodes-base.gmail")
        assert unused["workflows"] == [] and unused["workflowsInScope"] == 3
        hidden = await alice.refused("get-node-usage", projectId="p3")
        assert hidden.code() is grpc.StatusCode.NOT_FOUND


# -- instance-activity -------------------------------------------------------------------------


async def create_credential(channel: grpc.aio.Channel, metadata: Metadata, name: str) -> str:
    created = await credentials_pb2_grpc.CredentialsStub(channel).CreateCredential(
        credentials_pb2.CreateCredentialRequest(
            name=name, type="slackApi", data_json=to_json({"accessToken": "xoxb-1"})
        ),
        metadata=metadata,
    )
    return str(created.credential.id)


async def test_instance_activity_lists_and_expands_who_changed_what(
    make_settings: Callable[..., Settings],
) -> None:
    allow = {
        a: "always_allow"
        for a in ("deleteWorkflow", "updateWorkflow", "publishWorkflow", "deleteCredential")
    }
    settings = make_settings(permissions=allow, licensed_features=["namedVersions"])
    async with serving(settings) as (app, channel):
        await app.parts.events.append("usage", "thread-title-updated", {"title": "usage"})
        alice = ToolClient(channel, "act-alice", ALICE)
        bob = ToolClient(channel, "act-bob", BOB)
        # Saved by the service's own work (no call acting): nobody's.
        orders = await save(app, "Orders", "p1", MANUAL)
        await save(app, "Orders", "p1", MANUAL, SLACK, HTTP, workflow_id=orders)
        await alice.call("publish-workflow", workflowId=orders)
        draft = (await alice.call("get-workflow", workflowId=orders))["versionId"]
        await alice.call("update-workflow-version", workflowId=orders, versionId=draft, name="v2")
        await bob.call("unpublish-workflow", workflowId=orders)
        await alice.call("delete-workflow", workflowId=orders)
        credential = await create_credential(channel, ALICE, "Team Slack")
        await alice.call("delete-credential", credentialId=credential)
        await save(app, "Theirs", "p2", MANUAL)  # another project's change

        log = (await alice.call("instance-activity", action="list"))["entries"]
        assert [(e["category"], e["action"]) for e in log] == [
            ("credential", "deleted"),
            ("credential", "created"),
            ("workflow", "archived"),
            ("workflow", "unpublished"),
            ("workflow", "version-updated"),
            ("workflow", "published"),
            ("workflow", "saved"),
            ("workflow", "created"),
        ]
        ids = [e["id"] for e in log]
        assert ids == sorted(ids, reverse=True)
        by_action = {(e["category"], e["action"]): e for e in log}
        assert [e["byCurrentUser"] for e in log] == [
            True,
            True,
            True,
            False,
            True,
            True,
            False,
            False,
        ]
        saved = by_action[("workflow", "saved")]
        assert saved["resourceName"] == "Orders" and saved["resourceId"] == orders
        assert saved["detail"] == {"nodeCount": 3, "nodesAdded": ["httpRequest", "slack"]}
        assert by_action[("workflow", "created")]["detail"] == {"nodeCount": 1}
        assert by_action[("workflow", "version-updated")]["detail"] == {
            "versionId": draft,
            "versionName": "v2",
        }
        assert by_action[("credential", "created")]["detail"] == {"credentialType": "slackApi"}
        assert by_action[("credential", "created")]["resourceName"] == "Team Slack"

        # Bob sees the same project's log, with his own change as his.
        theirs = (await bob.call("instance-activity", action="list"))["entries"]
        assert [e["byCurrentUser"] for e in theirs] == [
            False,
            False,
            False,
            True,
            False,
            False,
            False,
            False,
        ]

        credentials = await alice.call("instance-activity", action="list", category="credential")
        assert [e["action"] for e in credentials["entries"]] == ["deleted", "created"]
        page = await alice.call("instance-activity", action="list", limit=3, beforeId=ids[2])
        assert [e["id"] for e in page["entries"]] == ids[3:6]
        one = await alice.call("instance-activity", action="list", resourceId=credential)
        assert len(one["entries"]) == 2

        opened = await alice.call("instance-activity", action="expand", id=ids[5])
        assert opened["entry"]["action"] == "published"
        assert [e["action"] for e in opened["resourceHistory"]] == [
            "archived",
            "unpublished",
            "version-updated",
            "saved",
            "created",
        ]
        assert opened["liveRecordHint"] == f'get-workflow(workflowId="{orders}")'
        assert (await alice.call("instance-activity", action="expand", id=99_999)) == {
            "notFound": True
        }
        # From a conversation in p2, only p2's log.
        elsewhere = ToolClient(channel, "act-p2", who("alice", "p2", "p1"))
        other = (await elsewhere.call("instance-activity", action="list"))["entries"]
        assert [(e["action"], e["resourceName"]) for e in other] == [("created", "Theirs")]
        assert (await elsewhere.call("instance-activity", action="expand", id=ids[0])) == {
            "notFound": True
        }


def test_instance_activity_is_offered_only_with_a_log() -> None:
    without = ToolRegistry(activity.TOOLS, [activity.ActivityTools(activity=None)])
    assert without.specs() == []
    overview = {spec.name: registered for spec, _schema, registered in without.overview()}
    assert overview == {"instance-activity": False}
    assert "embedded" in activity.TOOLS[0].requires


# -- conversation-history ----------------------------------------------------------------------


async def test_conversation_history_finds_and_reads_the_users_other_threads(
    make_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    question = {
        "id": "channel",
        "question": "Where should alerts go?",
        "type": "single",
        "options": ["Slack", "Email"],
    }
    model.script(
        text("Noted: invoices go to the finance channel."),
        tool("ask-user", {"questions": [question]}),
        text("Slack it is."),
        text("Mine."),
        text("Bob's."),
    )
    async with serving(make_settings(**with_model(model))) as (_app, channel):
        alice, bob = Chat(channel, ALICE), Chat(channel, BOB)
        past = await alice.send("t-past", "Our invoices go to the FINANCE channel")
        await alice.finished("t-past", past)
        asked = await alice.send("t-ask", "set up alerts")
        card = await alice.card("t-ask")
        answers = [
            {"questionId": "channel", "selectedOptions": ["Slack"], "customText": "urgent only"}
        ]
        await alice.confirm("t-ask", card["requestId"], kind="questions", answers=answers)
        await alice.finished("t-ask", asked)
        elsewhere = Chat(channel, who("alice", "p2", "p1"))
        run = await elsewhere.send("t-p2", "finance reports, other project")
        await elsewhere.finished("t-p2", run)
        run = await bob.send("t-bob", "finance for bob")
        await bob.finished("t-bob", run)

        tools = ToolClient(channel, "t-now", ALICE)
        found = await tools.call("conversation-history", action="search", query="finance")
        [hit] = found["hits"]
        assert hit["threadId"] == "t-past"
        assert hit["matchedIn"] == ["title", "messages"]
        assert hit["firstMessageExcerpt"] == "Our invoices go to the FINANCE channel"
        [excerpt] = hit["excerpts"]
        assert excerpt["text"] == "Our invoices go to the FINANCE channel"

        answered = await tools.call("conversation-history", action="search", query="Urgent Only")
        [hit] = answered["hits"]
        assert hit["threadId"] == "t-ask" and hit["matchedIn"] == ["user-answers"]
        assert hit["excerpts"][0]["text"] == ("Q: Where should alerts go? → A: Slack, urgent only")
        assert hit["excerpts"][0]["messageId"] == f"{asked}:answer"
        none = await tools.call("conversation-history", action="search", query="kubernetes")
        assert none == {"hits": []}

        recent = await tools.call("conversation-history", action="search")
        assert [h["threadId"] for h in recent["hits"]] == ["t-ask", "t-past"]
        assert all(h["matchedIn"] == [] and h["excerpts"] == [] for h in recent["hits"])
        newest = await tools.call("conversation-history", action="search", limit=1)
        assert [h["threadId"] for h in newest["hits"]] == ["t-ask"]
        # The conversation in progress is never among them.
        inside = ToolClient(channel, "t-past", ALICE)
        assert [
            h["threadId"]
            for h in (await inside.call("conversation-history", action="search"))["hits"]
        ] == ["t-ask"]

        read = await tools.call("conversation-history", action="get-messages", threadId="t-ask")
        assert read["title"] == "set up alerts"
        assert [(m["role"], m["text"]) for m in read["messages"]] == [
            ("user", "set up alerts"),
            ("assistant", "Slack it is."),
        ]
        assert read["messages"][1]["userAnswers"] == [
            {"question": "Where should alerts go?", "answer": "Slack, urgent only"}
        ]
        assert read["hasMoreBefore"] is False and read["hasMoreAfter"] is False
        around = await tools.call(
            "conversation-history",
            action="get-messages",
            threadId="t-ask",
            aroundMessageId=f"{asked}:answer",
            before=1,
        )
        assert [m["role"] for m in around["messages"]] == ["user", "assistant"]
        assert around["hasMoreAfter"] is False
        only_first = await tools.call(
            "conversation-history", action="get-messages", threadId="t-past", after=1
        )
        assert [m["role"] for m in only_first["messages"]] == ["user"]
        assert only_first["hasMoreAfter"] is True and only_first["hasMoreBefore"] is False

        for thread in ("t-bob", "t-p2", "nope"):
            denied = await tools.call(
                "conversation-history", action="get-messages", threadId=thread
            )
            assert denied["error"] == "Conversation not found" and denied["messages"] == []
        lost = await tools.call(
            "conversation-history", action="get-messages", threadId="t-ask", aroundMessageId="x"
        )
        assert lost["error"] == "Message not found in this conversation"
        both = await tools.refused(
            "conversation-history", action="get-messages", threadId="t-ask", before=1, after=1
        )
        assert both.code() is grpc.StatusCode.INVALID_ARGUMENT
        short = await tools.refused("conversation-history", action="search", query="f")
        assert short.code() is grpc.StatusCode.INVALID_ARGUMENT
