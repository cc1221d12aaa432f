"""Approval cards as a person meets them, through the agent on the Messages-API stand-in: each
says what will change (the rows, the filter, the column, the workflow), names the resource by
name, carries the contract's `approvalDetails`, and "allow for the session" covers what the
reference's grant keys cover. Every card passes n8n's event contract (the conftest hook)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from server.settings import Settings
from tests.agent_fixtures import (
    Chat,
    last_tool_results,
    model,
    model_settings,
    nth_card,
    of_type,
    with_model,
)
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool

__all__ = ["model", "model_settings"]  # fixtures, shared

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "order-intake.workflow.ts"


async def test_row_cards_show_the_rows_and_the_filter_and_a_session_grant_covers_the_operation(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    rows = [
        {"customer": "Ada", "total": 12.5, "note": "x" * 150},
        {"customer": "Linus", "total": 7},
    ]
    async with serving(model_settings()) as (app, channel):
        tables = app.parts.instance.data_tables
        orders = await tables.create(
            "orders", [("customer", "string"), ("total", "number"), ("note", "string")]
        )
        archive = await tables.create(
            "orders_archive", [("customer", "string"), ("total", "number"), ("note", "string")]
        )
        model.script(
            tool("insert-data-table-rows", {"dataTableId": orders.id, "rows": rows}),
            # Allowed for the session: inserting into another table asks no more ...
            tool("insert-data-table-rows", {"dataTableId": archive.id, "rows": rows[:1]}),
            # ... but deleting rows is another operation, and asks.
            tool(
                "delete-data-table-rows",
                {
                    "dataTableId": orders.id,
                    "filter": {
                        "type": "or",
                        "filters": [
                            {"columnName": "total", "condition": "lt", "value": 10},
                            {"columnName": "customer", "condition": "isEmpty"},
                        ],
                    },
                },
            ),
            text("Done."),
        )
        chat = Chat(channel)
        run = await chat.send("t1", "record two orders, archive one, drop the small ones")
        insert = await nth_card(chat, "t1", 1)
        assert insert["inputType"] == "approval" and insert["severity"] == "warning"
        assert insert["resourceName"] == "orders"  # the name, looked up, not the id
        assert insert["message"].startswith('Add 2 rows\n\nRow 1: set "customer" to "Ada"')
        details = insert["approvalDetails"]
        assert details["action"] == "insert-rows" and details["count"] == 2
        first = {v["column"]: v["value"] for v in details["rows"][0]["values"]}
        assert first["customer"] == '"Ada"' and first["total"] == "12.5"
        assert first["note"].endswith("…") and len(first["note"]) == 101  # long values cut
        await chat.confirm(
            "t1", insert["requestId"], kind="approval", approved=True, scope="session"
        )
        delete = await nth_card(chat, "t1", 2)
        assert delete["severity"] == "destructive" and delete["resourceName"] == "orders"
        assert (
            delete["message"]
            == 'Delete rows where "total" is less than 10 or "customer" has no value'
        )
        assert delete["approvalDetails"] == {
            "action": "delete-rows",
            "filter": {
                "type": "or",
                "filters": [
                    {"columnName": "total", "condition": "lt", "value": 10},
                    {"columnName": "customer", "condition": "eq", "value": None},
                ],
            },
        }
        await chat.confirm("t1", delete["requestId"], kind="approval", approved=False)
        events = await chat.finished("t1", run)
        assert len(of_type(events, "confirmation-request")) == 2
        assert (await tables.query(archive.id))[0] == 1  # inserted, unasked
        left = await tables.query(orders.id, limit=10)
        assert left[0] == 2  # the delete was denied: nothing went
    denied = last_tool_results(model.requests[3])[0]
    assert denied["is_error"] and "denied" in denied["content"]


async def test_a_new_workflow_asks_first_and_a_denial_saves_nothing(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    """createWorkflow under require_approval: the card comes before anything is built, with
    the model's one-line summary; a denial is a refused build the model is told not to
    repeat, and no workflow exists."""
    summary = "Post each new order to the sales channel"
    model.script(
        tool(
            "build-workflow",
            {"filePath": "src/order-alerts.workflow.ts", "approvalSummary": summary},
        ),
        text("Understood, nothing was saved."),
    )
    async with serving(model_settings(permissions={})) as (app, channel):
        chat = Chat(channel)
        run = await chat.send("t1", "alert sales about new orders")
        card = await chat.card("t1")
        assert card["toolName"] == "build-workflow" and card["inputType"] == "approval"
        assert card["message"] == summary
        assert card["resourceName"] == "order alerts"
        assert card["approvalDetails"] == {"action": "edit-workflow", "summary": summary}
        await chat.confirm("t1", card["requestId"], kind="approval", approved=False)
        await chat.finished("t1", run)
        listed = await app.parts.instance.workflows.listing(limit=10)
        assert [w.name for w in listed] == []
    refused = json.loads(last_tool_results(model.requests[1])[0]["content"])
    assert refused["success"] is False
    assert refused["remediation"]["reason"] == "user_denied"
    assert "Do not re-issue" in refused["remediation"]["guidance"]


async def test_the_create_card_names_the_workflow_and_its_nodes_and_covers_the_files_rebuilds(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    """With a sandbox the card is made from the checked source (nothing saved yet): the
    workflow's own name and its nodes. Approved once, the file's later builds save into its
    workflow without asking again."""
    source = await asyncio.to_thread(EXAMPLE.read_text)
    path = "src/intake.workflow.ts"
    model.script(
        tool("workspace_write_file", {"path": path, "content": source}),
        tool("build-workflow", {"filePath": path}),
        tool("workspace_write_file", {"path": path, "content": source.replace("Queue", "Hold")}),
        tool("build-workflow", {"filePath": path}),
        text("Built it."),
    )
    settings = make_docker_settings(**with_model(model, permissions={}))
    async with serving(settings) as (app, channel):
        chat = Chat(channel)
        run = await chat.send("t1", "build the order intake")
        card = await chat.card("t1", within=120)
        assert card["resourceName"] == "Order intake"
        assert card["message"].startswith('Create "Order intake" with 5 nodes: ')
        for node in ("Prioritise", "Urgent?", "Announce", "Queue"):
            assert node in card["message"]
        listed = await app.parts.instance.workflows.listing(limit=10)
        assert listed == []  # asking saved nothing
        await chat.confirm("t1", card["requestId"], kind="approval", approved=True)
        events = await chat.finished("t1", run, within=240)
    assert len(of_type(events, "confirmation-request")) == 1
    first = json.loads(last_tool_results(model.requests[2])[0]["content"])
    second = json.loads(last_tool_results(model.requests[4])[0]["content"])
    assert first["success"] and second["success"]
    assert second["workflowId"] == first["workflowId"]
