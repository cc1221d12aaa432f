"""Credentials at build and after: a slot with no single usable credential is mocked (taken
off the node and recorded), verification simulates exactly that node, apply-workflow-credentials
puts a real credential on (checked: it exists, is of the slot's type, is the caller's), and then
verification runs the node for real through the egress proxy and can reach `verified`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from aiohttp import web

from server.app import Application
from server.settings import Settings
from tests.agent_fixtures import Chat, last_tool_results, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.test_build import THREAD, Client
from tests.workflow_json import chain, node

__all__ = ["model"]  # fixtures, shared

SECRET = "key-PLANTED-31"


@dataclass
class Orders:
    port: int
    keys_seen: list[str]


@pytest.fixture
async def orders() -> AsyncIterator[Orders]:
    """A loopback API that answers only the right key."""
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("X-Api-Key", ""))
        if request.headers.get("X-Api-Key") != SECRET:
            return web.json_response({"error": "bad key"}, status=401)
        return web.json_response({"orders": 3})

    service = web.Application()
    service.router.add_get("/orders", handle)
    runner = web.AppRunner(service)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.2", 0)  # proxied, like any outside host
    await site.start()
    try:
        yield Orders(int(site._server.sockets[0].getsockname()[1]), seen)  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def orders_workflow(port: int, credentials: dict[str, Any] | None = None) -> str:
    fetch = node(
        "Fetch",
        "httpRequest",
        200,
        url=f"http://127.0.0.2:{port}/orders",
        authentication="genericCredentialType",
        genericAuthType="httpHeaderAuth",
        options={},
    )
    if credentials is not None:
        fetch["credentials"] = credentials
    total = {"id": "o", "name": "count", "value": "={{ $json.orders }}", "type": "number"}
    count = node(
        "Count",
        "set",
        400,
        mode="manual",
        includeOtherFields=False,
        assignments={"assignments": [total]},
    )
    return json.dumps(
        {
            "name": "Orders",
            "nodes": [node("Start", "manualTrigger"), fetch, count],
            "connections": chain("Start", "Fetch", "Count"),
        }
    )


async def header_credential(app: Application, name: str, value: str, project: str = "personal"):  # type: ignore[no-untyped-def]
    return await app.parts.instance.credentials.create(
        project_id=project,
        name=name,
        type_name="httpHeaderAuth",
        data={"name": "X-Api-Key", "value": value},
    )


@pytest.fixture
async def client(
    make_docker_settings: Callable[..., Settings], orders: Orders
) -> AsyncIterator[Client]:
    settings = make_docker_settings(web_fetch_allow_hosts=[f"127.0.0.2:{orders.port}"])
    async with serving(settings) as (app, channel):
        await app.parts.hitl.allow_domain(THREAD, "127.0.0.2")
        yield Client(app, channel)


def node_named(workflow: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in workflow["nodes"] if n["name"] == name)


async def test_a_mocked_credential_is_simulated_until_the_real_one_is_applied(
    client: Client, orders: Orders
) -> None:
    await client.write("src/orders.json", orders_workflow(orders.port))
    # Two credentials of the slot's type: no guessing between them, so the slot is mocked.
    real = await header_credential(client.app, "Orders key", SECRET)
    await header_credential(client.app, "Old key", "key-OLD")
    built = await client.build("src/orders.json")
    assert built.success, built.errors
    assert list(built.mocked_credential_types) == ["httpHeaderAuth"]
    assert list(built.mocked_node_names) == ["Fetch"]
    assert (
        "Fetch" in built.credential_note and "apply-workflow-credentials" in built.credential_note
    )
    saved = await client.call("get-workflow", workflowId=built.workflow_id)
    assert "credentials" not in node_named(saved, "Fetch")

    mocked = await client.call("verify-built-workflow", workflowId=built.workflow_id)
    assert mocked["success"], mocked
    assert mocked["simulatedNodes"] == ["Fetch"]
    assert mocked["claim"]["level"] == "partial"
    assert orders.keys_seen == []  # simulated: nothing went out
    # The saved run says which outputs were fixtures.
    run = await client.call("get-execution", executionId=mocked["executionId"])
    assert run["isVerification"]
    assert [n["nodeName"] for n in run["simulation"]["simulatedNodes"]] == ["Fetch"]
    assert run["simulation"]["simulatedNodes"][0]["source"] == "mocked"

    # Refused, all or none: an id that does not exist, then one of another type.
    other = await client.app.parts.instance.credentials.create(
        project_id="personal", name="Basic", type_name="httpBasicAuth", data={"user": "u"}
    )
    for credential_id, code in (("cred_nope", "NOT_FOUND"), (other.id, "INVALID_ARGUMENT")):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.call(
                "apply-workflow-credentials",
                workflowId=built.workflow_id,
                workItemId=built.work_item_id,
                credentials={"Fetch": {"httpHeaderAuth": {"id": credential_id, "name": "x"}}},
            )
        assert refused.value.code().name == code
        assert "httpHeaderAuth" in (refused.value.details() or "")
    unchanged = await client.call("get-workflow", workflowId=built.workflow_id)
    assert unchanged["versionId"] == saved["versionId"]

    applied = await client.call(
        "apply-workflow-credentials",
        workflowId=built.workflow_id,
        workItemId=built.work_item_id,
        credentials={"Fetch": {"httpHeaderAuth": {"id": real.id, "name": "whatever"}}},
    )
    assert applied == {"updatedNodes": ["Fetch"]}
    after = await client.call("get-workflow", workflowId=built.workflow_id)
    assert node_named(after, "Fetch")["credentials"] == {
        "httpHeaderAuth": {"id": real.id, "name": "Orders key"}
    }

    verified = await client.call("verify-built-workflow", workflowId=built.workflow_id)
    assert verified["success"], verified
    assert verified["simulatedNodes"] == []
    assert verified["claim"]["level"] == "verified"
    assert orders.keys_seen == [SECRET]  # the node ran for real, with the real key
    count = next(p for p in verified["nodePreviews"] if p["nodeName"] == "Count")
    assert json.loads(count["preview"]) == [{"count": 3}]
    assert SECRET not in json.dumps(verified)

    # A rebuild of the same source keeps the credential the workflow now has.
    rebuilt = await client.build("src/orders.json")
    assert rebuilt.success and list(rebuilt.mocked_credential_types) == []
    again = await client.call("get-workflow", workflowId=built.workflow_id)
    assert node_named(again, "Fetch")["credentials"]["httpHeaderAuth"]["id"] == real.id


async def test_the_one_usable_credential_is_bound_and_anothers_is_never_used(
    client: Client, orders: Orders
) -> None:
    # Only another project's credential of the type: not usable, so mocked.
    theirs = await header_credential(client.app, "Their key", SECRET, project="team-b")
    await client.write("src/orders.json", orders_workflow(orders.port))
    built = await client.build("src/orders.json")
    assert built.success and list(built.mocked_node_names) == ["Fetch"]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.call(
            "apply-workflow-credentials",
            workflowId=built.workflow_id,
            workItemId=built.work_item_id,
            credentials={"Fetch": {"httpHeaderAuth": {"id": theirs.id}}},
        )
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND
    # A source naming it explicitly does not get it either.
    await client.write(
        "src/named.json",
        orders_workflow(orders.port, {"httpHeaderAuth": {"id": theirs.id, "name": "Their key"}}),
    )
    named = await client.build("src/named.json")
    assert named.success and list(named.mocked_node_names) == ["Fetch"]

    # With exactly one credential of the type of the caller's own, the build binds it.
    mine = await header_credential(client.app, "My key", SECRET)
    bound = await client.build("src/orders.json")
    assert bound.success and list(bound.mocked_credential_types) == []
    assert "My key" in bound.credential_note
    saved = await client.call("get-workflow", workflowId=bound.workflow_id)
    assert node_named(saved, "Fetch")["credentials"] == {
        "httpHeaderAuth": {"id": mine.id, "name": "My key"}
    }
    result = await client.call("verify-built-workflow", workflowId=bound.workflow_id)
    assert result["success"] and result["simulatedNodes"] == []
    assert orders.keys_seen == [SECRET]


GIST = (
    *("success", "status", "name", "toolName", "mockedCredentialTypes", "mockedNodeNames"),
    *("simulatedNodes", "updatedNodes", "action", "phase"),
)


def gist(result: dict[str, Any]) -> dict[str, Any]:
    """The fields of a tool result that tell the story (a claim by its level, a search by
    the names it found)."""
    found = {k: result[k] for k in GIST if k in result}
    if "claim" in result:
        found["claim"] = result["claim"]["level"]
    if "results" in result:
        found["found"] = [r["name"] for r in result["results"]]
    return found


def transcript(events: list[dict[str, Any]]) -> list[str]:
    """The conversation's durable events, one line each (what the closing note shows)."""
    lines = []
    for event in events:
        payload = event["payload"]
        if event["type"] == "tool-call":
            lines.append(f"tool-call {payload['toolName']} {json.dumps(payload['args'])[:160]}")
        elif event["type"] == "tool-result":
            lines.append(f"tool-result {json.dumps(gist(payload['result']))[:240]}")
        elif event["type"] in ("tool-error", "text-block"):
            lines.append(f"{event['type']} {payload.get('error') or payload.get('text')}")
        elif event["type"] in ("run-start", "run-finish"):
            lines.append(event["type"])
    return lines


async def test_a_conversation_loads_a_skill_finds_a_tool_and_reaches_verified(
    make_docker_settings: Callable[..., Settings], orders: Orders, model: FakeMessagesAPI
) -> None:
    """The whole arc with the real agent loop, tools loaded on demand (the default): load the
    workflow-builder skill, find and load apply-workflow-credentials, build with a mocked
    credential, verify (simulated), apply the real credential, verify for real: verified."""
    settings = make_docker_settings(
        **with_model(model, agent_deferred_tools=True),
        web_fetch_allow_hosts=[f"127.0.0.2:{orders.port}"],
    )
    async with serving(settings) as (app, channel):
        await header_credential(app, "Old key", "key-OLD")
        real = await header_credential(app, "Orders key", SECRET)
        await app.parts.hitl.allow_domain("arc", "127.0.0.2")
        chat = Chat(channel)
        path = "src/orders.json"
        ids: dict[str, str] = {}

        def remember(request: dict[str, Any]) -> str:
            built = json.loads(last_tool_results(request)[0]["content"])
            ids["workflow"], ids["workItem"] = built["workflowId"], built["workItemId"]
            return wf()

        def wf() -> str:
            return ids["workflow"]

        def item() -> str:
            return ids["workItem"]

        steps: list[Callable[[dict[str, Any]], Turn]] = [
            lambda _: tool("load_skill", {"name": "workflow-builder"}),
            lambda _: tool(
                "workspace_write_file", {"path": path, "content": orders_workflow(orders.port)}
            ),
            lambda _: tool("build-workflow", {"filePath": path}),
            lambda r: tool("verify-built-workflow", {"workflowId": remember(r)}),
            lambda _: tool("search_tools", {"query": "apply real credentials to mocked nodes"}),
            lambda _: tool("load_tool", {"toolName": "apply-workflow-credentials"}),
            lambda _: tool(
                "apply-workflow-credentials",
                {
                    "workflowId": wf(),
                    "workItemId": item(),
                    "credentials": {"Fetch": {"httpHeaderAuth": {"id": real.id}}},
                },
            ),
            lambda _: tool("verify-built-workflow", {"workflowId": wf()}),
            lambda _: tool(
                "report-verification-verdict",
                {
                    "workItemId": item(),
                    "workflowId": wf(),
                    "verdict": "verified",
                    "workflowInspection": "Fetch ran with the real key; Count got 3 orders",
                },
            ),
            lambda _: text("Built, connected to your Orders key, and verified for real."),
        ]
        model.responder = lambda request: steps.pop(0)(request) if steps else None
        run_id = await chat.send("arc", "Count my orders from the orders API")
        events = await chat.finished("arc", run_id, within=180)
    lines = transcript(events)
    print("\n".join(lines))  # the transcript, for whoever reads the run (-s)
    calls = [line.split()[1] for line in lines if line.startswith("tool-call")]
    assert calls == [
        "load_skill",
        "workspace_write_file",
        "build-workflow",
        "verify-built-workflow",
        "search_tools",
        "load_tool",
        "apply-workflow-credentials",
        "verify-built-workflow",
        "report-verification-verdict",
    ]
    assert not any(line.startswith("tool-error") for line in lines), lines
    results = [
        json.loads(r["content"]) for r in (last_tool_results(q)[0] for q in model.requests[1:])
    ]
    built, first, found = results[2], results[3], results[4]
    assert built["mockedCredentialTypes"] == ["httpHeaderAuth"] and built["mockedNodeNames"] == [
        "Fetch"
    ]
    assert first["simulatedNodes"] == ["Fetch"] and first["claim"]["level"] == "partial"
    assert "apply-workflow-credentials" in [t["name"] for t in found["results"]]
    second, verdict = results[7], results[8]
    assert second["simulatedNodes"] == [] and second["claim"]["level"] == "verified"
    assert verdict["guidance"] and orders.keys_seen == [SECRET]
    # The first request offered the core only; apply-workflow-credentials came when loaded.
    offered = [{t["name"] for t in r["tools"]} for r in model.requests]
    assert (
        "apply-workflow-credentials" not in offered[0]
        and "apply-workflow-credentials" in offered[6]
    )
    assert SECRET not in json.dumps(events)
