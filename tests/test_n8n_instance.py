"""The user's n8n as the system of record, against a real n8n 2.41.1: builds land in n8n,
the workflow tools read and change n8n's workflows, publishing really activates (the
production webhook answers), the calling user's own key is used, and n8n's faults come back
as clear statuses."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import sqlalchemy as sa
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from structlog.testing import capture_logs

from instance_ai.json_text import to_json
from instance_ai.v1 import agent_pb2, credentials_pb2, credentials_pb2_grpc
from instance_ai_cli import n8n_local
from server.api.server import INSTANCE_HEALTH
from server.app import Application
from server.instance.types import WorkflowContent
from server.n8n import workflows as n8n_workflows
from server.n8n.client import N8nClient
from server.n8n.workflows import N8nWorkflows
from server.settings import Settings, SettingsError, load_settings
from server.store import Database
from tests.agent_fixtures import Chat, last_tool_results, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.n8n_fixtures import CUSTOM_CREDENTIAL_TYPE, N8nApi, make_n8n_settings, n8n
from tests.test_agent_sandbox import result_of
from tests.test_build import Client, graph
from tests.test_data_tables import ALLOW as TABLES_ALLOW
from tests.test_data_tables import COLUMNS, Tables, orders, where
from tests.tool_client import ToolClient

__all__ = ["make_n8n_settings", "model", "n8n"]  # fixtures, shared

ALLOW = {
    a: "always_allow"
    for a in (
        "createWorkflow",
        "publishWorkflow",
        "deleteWorkflow",
        "updateWorkflow",
        "tagWorkflow",
        "restoreWorkflowVersion",
    )
}


def greeter(path: str, greeting: str = "hi") -> str:
    """A webhook workflow that answers with a greeting for the posted name."""
    return f"""import {{ expr, node, trigger, workflow }} from '@n8n/workflow-sdk';

const hook = trigger({{
  type: 'n8n-nodes-base.webhook',
  version: 2.1,
  config: {{
    name: 'Hook',
    parameters: {{ httpMethod: 'POST', path: '{path}', responseMode: 'lastNode' }},
    pinData: [{{ body: {{ name: 'Ada' }} }}],
  }},
}});

const greet = node({{
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {{
    name: 'Greet',
    parameters: {{
      mode: 'manual',
      assignments: {{
        assignments: [
          {{
            id: 'g',
            name: 'greeting',
            value: expr('{{{{ "{greeting} " + $json.body.name }}}}'),
            type: 'string',
          }},
        ],
      }},
    }},
  }},
}});

export default workflow('greeter', 'Greeter {path}').add(hook).to(greet);
"""


async def answered(api: N8nApi, path: str, body: dict[str, Any], *, want: int) -> httpx.Response:
    """The production webhook's answer, once it has the status wanted (registering and
    unregistering a webhook takes n8n a moment after the API call returns)."""
    for _ in range(60):
        response = await api.webhook(path, body)
        if response.status_code == want:
            return response
        await asyncio.sleep(0.25)
    raise AssertionError(f"webhook {path} answered {response.status_code}, not {want}")


def test_the_n8n_instance_needs_its_url_and_a_key() -> None:
    with pytest.raises(SettingsError, match="n8n_url and an API key"):
        load_settings(instance="n8n")
    with pytest.raises(SettingsError, match="base URL"):
        load_settings(instance="n8n", n8n_url="127.0.0.1:5678", n8n_api_key="k")


async def test_a_conversation_builds_verifies_and_publishes_into_n8n(
    make_n8n_settings: Callable[..., Settings], model: FakeMessagesAPI, n8n: n8n_local.LocalN8n
) -> None:
    api = N8nApi(n8n)
    path = f"greet-{uuid.uuid4().hex[:8]}"
    built: dict[str, Any] = {}

    def after_build(request: dict[str, Any]) -> Turn:
        built.update(result_of(request))
        assert built["success"], built
        return tool(
            "verify-built-workflow",
            {"workflowId": built["workflowId"], "workItemId": built["workItemId"]},
        )

    def after_verify(request: dict[str, Any]) -> Turn:
        built["verified"] = result_of(request)
        return tool("publish-workflow", {"workflowId": built["workflowId"]})

    steps: list[Callable[[dict[str, Any]], Turn]] = [
        lambda _r: tool(
            "workspace_write_file", {"path": "src/greeter.workflow.ts", "content": greeter(path)}
        ),
        lambda r: (result_of(r), tool("build-workflow", {"filePath": "src/greeter.workflow.ts"}))[
            1
        ],
        after_build,
        after_verify,
        lambda r: (built.update(published=result_of(r)), text("Published."))[1],
    ]
    model.responder = lambda request: steps.pop(0)(request)
    settings = make_n8n_settings(**with_model(model, permissions=ALLOW))
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("greet", "Build a greeter webhook, verify it and publish it")
        events = await chat.finished("greet", run_id, within=240)
        assert events[-1]["payload"].get("status") in (None, "completed"), events[-1]

        # The workflow is n8n's: its nodes and connections as built.
        workflow = await api.call("GET", f"/workflows/{built['workflowId']}")
        assert graph(workflow) == (
            {"Hook": "n8n-nodes-base.webhook", "Greet": "n8n-nodes-base.set"},
            {("Hook", "main", 0, "Greet")},
        )
        # Verified on the sandboxed engine, with the declared fixture.
        verified = built["verified"]
        assert verified["success"], verified
        # Published for real: the production webhook answers with the workflow's output.
        assert workflow["active"] is True and workflow["activeVersionId"] == workflow["versionId"]
        response = await answered(api, path, {"name": "Grace"}, want=200)
        assert response.json()["greeting"] == "hi Grace"
        executions = await api.call("GET", f"/executions?workflowId={built['workflowId']}")
        assert [e["status"] for e in executions["data"]][:1] == ["success"]

        # The tools see both sides: the sandbox's verification run and n8n's webhook run.
        tools = ToolClient(channel, "greet")
        listed = await tools.call("list-executions", workflowId=built["workflowId"])
        by_place = {e["ranIn"]: e for e in listed["executions"]}
        assert set(by_place) == {"sandbox", "instance"}, listed
        webhook_run = by_place["instance"]
        assert webhook_run["id"] == executions["data"][0]["id"] and webhook_run["mode"] == "webhook"
        debugged = await tools.call("debug-execution", executionId=webhook_run["id"])
        assert debugged["status"] == "success" and debugged.get("failedNode") is None
        assert [t["name"] for t in debugged["nodeTrace"]] == ["Hook", "Greet"]
        output = await tools.call(
            "get-node-output", executionId=webhook_run["id"], nodeName="Greet"
        )
        assert output["data"][0][0]["greeting"] == "hi Grace"
        got = await tools.call("get-execution", executionId=webhook_run["id"])
        assert got["ranIn"] == "instance" and got["status"] == "success"


async def test_the_workflow_tools_act_on_n8n(
    make_n8n_settings: Callable[..., Settings], n8n: n8n_local.LocalN8n
) -> None:
    api = N8nApi(n8n)
    path = f"tools-{uuid.uuid4().hex[:8]}"
    async with serving(make_n8n_settings(permissions=ALLOW)) as (app, channel):
        client = Client(app, channel)
        await client.write("src/g.workflow.ts", greeter(path))
        first = await client.build("src/g.workflow.ts")
        assert first.success, first.errors
        # The same file built again is a new version of the same n8n workflow.
        await client.write("src/g.workflow.ts", greeter(path, greeting="hello"))
        second = await client.build("src/g.workflow.ts")
        assert second.success and second.workflow_id == first.workflow_id
        history = await api.call("GET", f"/workflows/{first.workflow_id}/history")
        assert len(history["data"]) == 2

        listed = await client.call("list-workflows", query=path)
        assert [w["id"] for w in listed["workflows"]] == [first.workflow_id]
        # n8n decided what the key may read; the service's own projects do not hide it.
        team = ToolClient(channel, "team").as_caller((("x-instance-ai-project", "team-a"),))
        assert (await team.call("get-workflow", workflowId=first.workflow_id))["id"] == (
            first.workflow_id
        )
        got = await client.call("get-workflow", workflowId=first.workflow_id)
        assert {n["name"] for n in got["nodes"]} == {"Hook", "Greet"}
        code = (await client.call("get-workflow-as-code", workflowId=first.workflow_id))["code"]
        assert "hello " in code and path in code
        versions = await client.call("list-workflow-versions", workflowId=first.workflow_id)
        assert len(versions["versions"]) == 2
        older = versions["versions"][-1]["versionId"]
        await client.call(
            "update-workflow-version", workflowId=first.workflow_id, versionId=older, name="first"
        )
        restored = await client.call(
            "restore-workflow-version", workflowId=first.workflow_id, versionId=older
        )
        current = await api.call("GET", f"/workflows/{first.workflow_id}")
        assert current["versionId"] == restored["versionId"]
        assert "hi " in json.dumps(current["nodes"]) and "hello " not in json.dumps(
            current["nodes"]
        )
        listed_versions = await client.call("list-workflow-versions", workflowId=first.workflow_id)
        assert [v.get("name") for v in listed_versions["versions"]][-1] == "first"
        assert len(listed_versions["versions"]) == 3
        # The restored version verifies with the fixtures of the one it came from.
        inputs = await app.parts.instance.workflows.verification_inputs(restored["versionId"])
        assert inputs[0], inputs
        await client.write("src/g.workflow.ts", greeter(path, greeting="hello"))
        assert (await client.build("src/g.workflow.ts")).success

        await client.call("tag-workflow", workflowId=first.workflow_id, tags=["greeting", "demo"])
        tags = await api.call("GET", f"/workflows/{first.workflow_id}/tags")
        assert sorted(t["name"] for t in tags) == ["demo", "greeting"]

        await client.call("publish-workflow", workflowId=first.workflow_id)
        assert (await answered(api, path, {"name": "Lin"}, want=200)).json() == {
            "greeting": "hello Lin"
        }
        await client.call("unpublish-workflow", workflowId=first.workflow_id)
        await answered(api, path, {"name": "Lin"}, want=404)

        await client.call("delete-workflow", workflowId=first.workflow_id)
        assert (await api.call("GET", f"/workflows/{first.workflow_id}"))["isArchived"] is True
        # A build bound to the archived workflow is blocked, not recreated.
        blocked = await client.build("src/g.workflow.ts")
        assert not blocked.success and blocked.remediation.category == "blocked"
        await client.call("unarchive-workflow", workflowId=first.workflow_id)
        assert (await api.call("GET", f"/workflows/{first.workflow_id}"))["isArchived"] is False

        # Deleted in n8n meanwhile: the same remediation.
        await api.call("POST", f"/workflows/{first.workflow_id}/archive")
        await api.call("DELETE", f"/workflows/{first.workflow_id}")
        gone = await client.build("src/g.workflow.ts")
        assert not gone.success and gone.remediation.category == "blocked"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.call("get-workflow", workflowId=first.workflow_id)
        assert refused.value.code() is grpc.StatusCode.NOT_FOUND
        # n8n's folders need a licence and its public API: the folder tools are not offered.
        with pytest.raises(grpc.aio.AioRpcError) as unoffered:
            await client.call("list-folders")
        assert "not available" in (unoffered.value.details() or "")


async def test_the_calling_users_key_is_the_one_used_and_never_shown(
    make_settings: Callable[..., Settings], n8n: n8n_local.LocalN8n
) -> None:
    settings = make_settings(instance="n8n", n8n_url=n8n.url, n8n_api_key="not-a-valid-key")
    with capture_logs() as logs:
        async with serving(settings) as (_app, channel):
            client = ToolClient(channel, "keys")
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=INSTANCE_HEALTH)
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            # The service's own key is refused by n8n: a clear PERMISSION_DENIED.
            refused = await client.refused("list-workflows")
            assert refused.code() is grpc.StatusCode.PERMISSION_DENIED
            assert "API key" in (refused.details() or "")
            assert "not-a-valid-key" not in (refused.details() or "")
            # The user's own key, sent as metadata, is used instead.
            user = client.as_caller((("x-n8n-api-key", n8n.api_key),))
            assert "workflows" in await user.call("list-workflows")
            stranger = client.as_caller((("x-n8n-api-key", "users-wrong-key-123"),))
            wrong = await stranger.refused("list-workflows")
            assert wrong.code() is grpc.StatusCode.PERMISSION_DENIED
            assert "users-wrong-key-123" not in (wrong.details() or "")
    logged = json.dumps(logs, default=str)
    for secret in (n8n.api_key, "users-wrong-key-123", "not-a-valid-key"):
        assert secret not in logged


async def test_an_unreachable_n8n_is_unavailable_with_what_to_check(
    make_settings: Callable[..., Settings],
) -> None:
    closed = f"http://127.0.0.1:{n8n_local.free_port()}"
    async with serving(make_settings(instance="n8n", n8n_url=closed, n8n_api_key="k")) as (
        _app,
        channel,
    ):
        refused = await ToolClient(channel, "keys").refused("list-workflows")
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=INSTANCE_HEALTH)
        )
    assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert refused.code() is grpc.StatusCode.UNAVAILABLE
    assert closed in (refused.details() or "") and "INSTANCE_AI_N8N_URL" in (
        refused.details() or ""
    )


async def test_data_tables_live_in_n8n(
    make_settings: Callable[..., Settings], n8n: n8n_local.LocalN8n
) -> None:
    """The data-table tools on n8n's tables: what they write, n8n's API reads back (and so
    does n8n's Data Table node)."""
    api = N8nApi(n8n)
    settings = make_settings(
        instance="n8n", n8n_url=n8n.url, n8n_api_key=n8n.api_key, permissions=TABLES_ALLOW
    )
    async with serving(settings) as (_app, channel):
        tables = Tables(channel)
        # A name of its own: the run's n8n is shared by every test that uses it.
        name = f"orders-{uuid.uuid4().hex[:8]}"
        table = await orders(tables, 200, name)
        in_n8n = await api.call("GET", f"/data-tables/{table}")
        assert in_n8n["name"] == name
        assert {c["name"]: c["type"] for c in in_n8n["columns"]} == {
            c["name"]: c["type"] for c in COLUMNS
        }
        rows = await api.call("GET", f"/data-tables/{table}/rows?limit=250")
        assert len(rows["data"]) == 200

        assert (await tables.query(table, where("amount", "gte", 297)))["count"] == 2
        missing = (await tables.query(table, where("customer", "isEmpty")))["count"]
        assert missing == len(range(0, 200, 7))
        assert (await tables.query(table, where("customer", "isNotEmpty")))[
            "count"
        ] == 200 - missing
        liked = await tables.query(table, where("customer", "like", "CUSTOMER-0%"))
        assert liked["count"] == len([n for n in range(200) if n % 7 and n % 50 < 10])
        either = await tables.query(
            table, where("paid", "eq", True), where("amount", "lte", 30), combine="or"
        )
        assert either["count"] == 100 + 10
        page = await tables.query(table, sortBy="amount", sortDirection="desc", limit=3, offset=1)
        assert [row["amount"] for row in page["data"]] == [297.0, 295.5, 294.0]

        updated = await tables.call(
            "update-data-table-rows",
            dataTableId=table,
            filter={"filters": [where("paid", "eq", False), where("amount", "lt", 15)]},
            data={"customer": "settled"},
        )
        assert updated == {"updatedCount": 5}
        deleted = await tables.call(
            "delete-data-table-rows",
            dataTableId=table,
            filter={"filters": [where("amount", "gte", 150)]},
        )
        assert deleted == {"deletedCount": 100}
        rows = await api.call("GET", f"/data-tables/{table}/rows?limit=250")
        assert len(rows["data"]) == 100
        assert sum(r["customer"] == "settled" for r in rows["data"]) == 5

        added = await tables.call(
            "add-data-table-column", dataTableId=table, name="note", type="string"
        )
        await tables.call(
            "rename-data-table-column",
            dataTableId=table,
            columnId=added["column"]["id"],
            newName="remark",
        )
        columns = await api.call("GET", f"/data-tables/{table}/columns")
        assert "remark" in {c["name"] for c in columns}
        assert (await tables.call("delete-data-table", dataTableId=table)) == {"success": True}
        assert table not in {t["id"] for t in (await api.call("GET", "/data-tables"))["data"]}


async def test_a_credential_goes_to_n8n_which_uses_it_and_never_shows_it(
    make_settings: Callable[..., Settings], n8n: n8n_local.LocalN8n
) -> None:
    """Created through the Credentials service, kept by n8n (not here), used by an n8n
    workflow's request, tested by n8n's own test; the secret is in no answer, event or log."""
    api = N8nApi(n8n)
    secret = f"planted-{uuid.uuid4().hex}"
    seen: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(request.headers.get("X-Key", ""))
        return web.json_response({"ok": True})

    receiver = web.Application()
    receiver.router.add_get("/echo", echo)
    runner = web.AppRunner(receiver)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    settings = make_settings(
        instance="n8n",
        n8n_url=n8n.url,
        n8n_api_key=n8n.api_key,
        permissions={"deleteCredential": "always_allow"},
    )
    try:
        with capture_logs() as logs:
            async with serving(settings) as (app, channel):
                stub = credentials_pb2_grpc.CredentialsStub(channel)
                created = await stub.CreateCredential(
                    credentials_pb2.CreateCredentialRequest(
                        name="echo key",
                        type="httpHeaderAuth",
                        data_json=to_json({"name": "X-Key", "value": secret}),
                    )
                )
                credential_id = created.credential.id
                assert secret not in str(created)
                # n8n has it (and answers without the secret); the service kept nothing.
                in_n8n = await api.call("GET", f"/credentials/{credential_id}")
                assert in_n8n["type"] == "httpHeaderAuth" and secret not in json.dumps(in_n8n)
                async with app.parts.db.engine.connect() as conn:
                    kept = (
                        await conn.execute(sa.text("SELECT count(*) FROM credentials"))
                    ).scalar()
                assert kept == 0

                tools = ToolClient(channel, "creds")
                listed = await tools.call("list-credentials")
                assert [c["id"] for c in listed["credentials"]] == [credential_id]
                tested = await tools.call("test-credential", credentialId=credential_id)
                assert tested["success"] is False and "testing function" in tested["message"]

                # An n8n workflow uses it: its request carries the secret to our receiver.
                path = f"cred-{uuid.uuid4().hex[:8]}"
                workflow = await api.call(
                    "POST", "/workflows", credential_workflow(path, port, credential_id)
                )
                await api.call("POST", f"/workflows/{workflow['id']}/activate")
                await answered(api, path, {}, want=200)
                assert seen and seen[-1] == secret

                await tools.call("delete-credential", credentialId=credential_id)
                assert (await api.call("GET", "/credentials"))["data"] == []
                events = await rows_of(app, "events")
                assert events  # the tool calls were recorded
        logged = json.dumps(logs, default=str)
        assert secret not in logged and secret not in json.dumps(events, default=str)
    finally:
        await runner.cleanup()


async def test_credential_types_only_n8n_knows_are_found_and_accepted(
    make_docker_settings: Callable[..., Settings], n8n: n8n_local.LocalN8n
) -> None:
    """A type of n8n's custom nodes (not in the node catalog) is found by its exact name, with
    its fields from n8n's schema, and accepted by CreateCredential; a misspelt one is refused
    with the nearest names. The embedded instance knows only the catalog's types."""
    api = N8nApi(n8n)
    data = to_json({"apiKey": f"k-{uuid.uuid4().hex}"})
    on_n8n = make_docker_settings(
        instance="n8n",
        n8n_url=n8n.url,
        n8n_api_key=n8n.api_key,
        permissions={"deleteCredential": "always_allow"},
    )
    async with serving(on_n8n) as (_app, channel):
        tools = ToolClient(channel, "types")
        found = (await tools.call("search-credential-types", query=CUSTOM_CREDENTIAL_TYPE))[
            "credentialTypes"
        ]
        assert found[0]["name"] == CUSTOM_CREDENTIAL_TYPE
        assert "apiKey (required)" in found[0]["description"]
        assert "region" in found[0]["description"]
        assert "region (required)" not in found[0]["description"]
        # The catalog's own types are still found by words.
        slack = await tools.call("search-credential-types", query="slack")
        assert "slackApi" in [c["name"] for c in slack["credentialTypes"]]

        stub = credentials_pb2_grpc.CredentialsStub(channel)
        created = await stub.CreateCredential(
            credentials_pb2.CreateCredentialRequest(
                name="ledger", type=CUSTOM_CREDENTIAL_TYPE, data_json=data
            )
        )
        in_n8n = await api.call("GET", f"/credentials/{created.credential.id}")
        assert in_n8n["type"] == CUSTOM_CREDENTIAL_TYPE
        with pytest.raises(grpc.aio.AioRpcError) as misspelt:
            await stub.CreateCredential(
                credentials_pb2.CreateCredentialRequest(
                    name="ledger", type=CUSTOM_CREDENTIAL_TYPE + "x", data_json=data
                )
            )
        assert misspelt.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown credential type" in str(misspelt.value.details())
        await tools.call("delete-credential", credentialId=created.credential.id)
    assert (await api.call("GET", "/credentials"))["data"] == []

    async with serving(make_docker_settings()) as (_app, channel):
        nothing = await ToolClient(channel, "types").call(
            "search-credential-types", query=CUSTOM_CREDENTIAL_TYPE
        )
        assert CUSTOM_CREDENTIAL_TYPE not in [c["name"] for c in nothing["credentialTypes"]]
        with pytest.raises(grpc.aio.AioRpcError) as embedded:
            await credentials_pb2_grpc.CredentialsStub(channel).CreateCredential(
                credentials_pb2.CreateCredentialRequest(
                    name="ledger", type=CUSTOM_CREDENTIAL_TYPE, data_json=data
                )
            )
        assert embedded.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def rows_of(app: Application, table: str) -> list[tuple[Any, ...]]:
    async with app.parts.db.engine.connect() as conn:
        return [tuple(row) for row in await conn.execute(sa.text(f"SELECT * FROM {table}"))]


def credential_workflow(path: str, port: int, credential_id: str) -> dict[str, Any]:
    """Webhook → HTTP Request to the test's receiver, authenticated with the credential."""
    return {
        "name": f"uses credential {path}",
        "nodes": [
            {
                "id": "h",
                "name": "Hook",
                "type": "n8n-nodes-base.webhook",
                "typeVersion": 2,
                "position": [0, 0],
                "parameters": {"path": path, "httpMethod": "POST", "responseMode": "lastNode"},
            },
            {
                "id": "r",
                "name": "Call",
                "type": "n8n-nodes-base.httpRequest",
                "typeVersion": 4.2,
                "position": [200, 0],
                "parameters": {
                    "url": f"http://127.0.0.1:{port}/echo",
                    "authentication": "genericCredentialType",
                    "genericAuthType": "httpHeaderAuth",
                    "options": {},
                },
                "credentials": {"httpHeaderAuth": {"id": credential_id, "name": "echo key"}},
            },
        ],
        "connections": {"Hook": {"main": [[{"node": "Call", "type": "main", "index": 0}]]}},
        "settings": {"executionOrder": "v1"},
    }


async def test_a_build_whose_records_fail_leaves_no_workflow_in_n8n(
    n8n: n8n_local.LocalN8n, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing half-written: when the service cannot record which file built the new
    workflow, the workflow is taken back out of n8n (else the next build would make another)."""
    api = N8nApi(n8n)
    db = await Database.open(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    client = N8nClient(n8n.url, n8n.api_key)
    name = f"half-{uuid.uuid4().hex[:8]}"

    async def disk_full(*_args: Any, **_kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(n8n_workflows, "bind_source", disk_full)
    try:
        with pytest.raises(OSError, match="disk full"):
            await N8nWorkflows(client, db).save_from_source(
                thread_id="t",
                file_path="src/a.workflow.ts",
                source_hash="h",
                content=WorkflowContent(name=name, nodes=[], connections={}, settings={}),
                workflow_id=None,
            )
    finally:
        await client.close()
        await db.close()
    names = [w["name"] for w in (await api.call("GET", "/workflows"))["data"]]
    archived = [w["name"] for w in (await api.call("GET", "/workflows?archived=true"))["data"]]
    assert name not in names + archived


async def test_a_run_acts_with_the_key_of_the_message_that_started_it(
    make_settings: Callable[..., Settings], model: FakeMessagesAPI, n8n: n8n_local.LocalN8n
) -> None:
    """The service's own key is refused by n8n; the user's key on SendMessage carries the
    whole run (its tool calls happen after the call has returned)."""
    seen: list[dict[str, Any]] = []

    def after_listing(request: dict[str, Any]) -> Turn:
        seen.extend(last_tool_results(request))
        return text("Listed.")

    steps: list[Callable[[dict[str, Any]], Turn]] = [
        lambda _r: tool("list-workflows", {}),
        after_listing,
    ]
    model.responder = lambda request: steps.pop(0)(request)
    settings = make_settings(
        instance="n8n", n8n_url=n8n.url, n8n_api_key="not-a-valid-key", **with_model(model)
    )
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        started = await chat.agent.SendMessage(
            agent_pb2.SendMessageRequest(thread_id="mine", message="list my workflows"),
            metadata=(("x-n8n-api-key", n8n.api_key),),
        )
        await chat.finished("mine", started.run_id)
    assert len(seen) == 1 and not seen[0].get("is_error"), seen
    assert "workflows" in json.loads(seen[0]["content"])
