"""setup-workflow: one card lists what each node still needs; the answer is applied as a new
version and reported per node."""

from __future__ import annotations

import json
from collections.abc import Callable

from instance_ai.json_text import to_json
from instance_ai.v1 import credentials_pb2, credentials_pb2_grpc
from server.instance.types import WorkflowContent
from server.settings import Settings
from tests.agent_fixtures import Chat, last_tool_results, model, of_type, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool

__all__ = ["model"]  # fixtures, shared


def node(
    name: str, parameters: dict[str, object], credentials: dict[str, object]
) -> dict[str, object]:
    return {
        "name": name,
        "type": "n8n-nodes-base.slack",
        "typeVersion": 2.3,
        "position": [0, 0],
        "parameters": parameters,
        "credentials": credentials,
    }


async def test_missing_credentials_and_placeholders_are_asked_for_and_applied(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    async with serving(make_docker_settings(**with_model(model))) as (app, channel):
        await app.parts.events.append("s1", "thread-title-updated", {"title": "test"})
        nodes = [
            node(
                "Notify",
                {"channelId": "<__PLACEHOLDER_VALUE__the alerts channel__>"},
                {"slackApi": {"id": "gone", "name": "old"}},
            ),
            node("Digest", {"text": "<__PLACEHOLDER_VALUE__digest text__>"}, {}),
            node("Ready", {"text": "hello"}, {}),
        ]
        saved = await app.parts.instance.workflows.save_from_source(
            thread_id="s1",
            file_path="src/alerts.workflow.ts",
            source_hash="h",
            content=WorkflowContent(name="Alerts", nodes=nodes, connections={}, settings={}),
            workflow_id=None,
        )
        created = await credentials_pb2_grpc.CredentialsStub(channel).CreateCredential(
            credentials_pb2.CreateCredentialRequest(
                name="Team Slack", type="slackApi", data_json=to_json({"accessToken": "xoxb-1"})
            )
        )
        slack = created.credential.id
        model.script(tool("setup-workflow", {"workflowId": saved.id}), text("Set up."))
        chat = Chat(channel)
        run_id = await chat.send("s1", "set it up")
        first = await chat.card("s1")
        listed = of_type(await chat.events("s1"), "setup-items")
        assert listed == [
            {
                "workflowId": saved.id,
                "items": [
                    {
                        "id": "credential:slackApi",
                        "kind": "credential",
                        "credentialType": "slackApi",
                        "nodeBindings": [{"nodeName": "Notify"}],
                    },
                    {
                        "id": "parameters:Notify",
                        "kind": "parameters",
                        "nodeName": "Notify",
                        "parameterNames": ["channelId"],
                    },
                    {
                        "id": "parameters:Digest",
                        "kind": "parameters",
                        "nodeName": "Digest",
                        "parameterNames": ["text"],
                    },
                ],
            }
        ]
        [notify] = first["setupRequests"]  # one node per card
        assert notify["nodeName"] == "Notify" and notify["credentialTypes"] == ["slackApi"]
        assert notify["parameters"] == [{"path": "channelId", "hint": "the alerts channel"}]
        assert notify["credentialType"] == "slackApi"
        assert notify["existingCredentials"] == [{"id": slack, "name": "Team Slack"}]
        assert notify["node"]["name"] == "Notify" and notify["isTrigger"] is False
        assert notify["parameterIssues"] == {"channelId": ["the alerts channel"]}
        await chat.confirm(
            "s1",
            first["requestId"],
            kind="setupWorkflowApply",
            nodeCredentials={"Notify": {"slackApi": slack}},
            nodeParameters={"Notify": {"channelId": "C0123"}},
        )
        second = await chat.until(
            "s1",
            lambda e: (
                e["type"] == "confirmation-request"
                and e["payload"]["requestId"] != first["requestId"]
            ),
        )
        [digest] = second[-1]["payload"]["setupRequests"]
        assert digest["nodeName"] == "Digest" and digest["credentialTypes"] == []
        applied = await app.parts.instance.workflows.require(saved.id)
        assert applied.version_number == 2  # the first answer is already saved
        await chat.confirm(
            "s1",
            second[-1]["payload"]["requestId"],
            kind="setupWorkflowApply",
            skippedNodes=["Digest"],
        )
        await chat.finished("s1", run_id)
        updated = await app.parts.instance.workflows.require(saved.id)
    result = json.loads(last_tool_results(model.requests[1])[0]["content"])
    assert result == {"completedNodes": ["Notify"], "skippedNodes": ["Digest"], "failedNodes": []}
    notify = next(n for n in updated.nodes if n["name"] == "Notify")
    assert notify["parameters"]["channelId"] == "C0123"
    assert notify["credentials"]["slackApi"] == {"id": slack, "name": "Team Slack"}
    assert updated.version_number == 2
