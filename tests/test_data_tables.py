"""Data table tools through `Tools.CallTool` over real gRPC, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from server.settings import Settings
from tests.agent_fixtures import Chat, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.tool_client import ToolClient

__all__ = ["model"]  # fixtures, shared

ALLOW = {
    action: "always_allow"
    for action in (
        "createDataTable",
        "deleteDataTable",
        "mutateDataTableSchema",
        "mutateDataTableRows",
    )
}
COLUMNS = [
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "number"},
    {"name": "paid", "type": "boolean"},
    {"name": "due", "type": "date"},
]


class Tables(ToolClient):
    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(channel, "dt")

    async def query(
        self, table: str, *filters: dict[str, Any], combine: str = "and", **options: Any
    ) -> dict[str, Any]:
        arguments: dict[str, Any] = {"dataTableId": table, **options}
        if filters:
            arguments["filter"] = {"type": combine, "filters": list(filters)}
        return await self.call("query-data-table-rows", **arguments)


@pytest.fixture
async def tables(
    make_settings: Callable[..., Settings], database_url: str
) -> AsyncIterator[Tables]:
    async with serving(make_settings(database_url=database_url, permissions=ALLOW)) as (
        _app,
        channel,
    ):
        yield Tables(channel)


def where(column: str, condition: str, value: Any = None) -> dict[str, Any]:
    return {"columnName": column, "condition": condition, "value": value}


async def orders(tables: Tables, rows: int, name: str = "orders") -> str:
    created = await tables.call("create-data-table", name=name, columns=COLUMNS)
    table_id = str(created["table"]["id"])
    for start in range(0, rows, 100):
        batch = [
            {
                "customer": f"customer-{n % 50:02d}" if n % 7 else None,
                "amount": n * 1.5,
                "paid": n % 2 == 0,
                "due": f"2026-{1 + n % 12:02d}-15T00:00:00Z",
            }
            for n in range(start, min(start + 100, rows))
        ]
        inserted = await tables.call("insert-data-table-rows", dataTableId=table_id, rows=batch)
        assert inserted["insertedCount"] == len(batch)
    return table_id


async def test_filters_sorting_and_paging_over_a_few_thousand_rows(tables: Tables) -> None:
    table = await orders(tables, 3000)
    everything = await tables.query(table, limit=100)
    assert everything["count"] == 3000 and len(everything["data"]) == 100
    assert isinstance(everything["count"], int)  # a whole number stays one across the API
    assert "2900 more rows" in everything["hint"]
    first = everything["data"][0]
    assert set(first) == {"id", "createdAt", "updatedAt", "customer", "amount", "paid", "due"}

    assert (await tables.query(table, where("amount", "gte", 4497)))["count"] == 2  # n = 2998, 2999
    assert (await tables.query(table, where("amount", "gt", 4497)))["count"] == 1
    assert (await tables.query(table, where("amount", "lt", 3)))["count"] == 2
    assert (await tables.query(table, where("paid", "eq", True)))["count"] == 1500
    missing = (await tables.query(table, where("customer", "isEmpty")))["count"]
    assert missing == len(range(0, 3000, 7))
    assert (await tables.query(table, where("customer", "isNotEmpty")))["count"] == 3000 - missing
    assert (await tables.query(table, where("customer", "neq", "customer-01")))[
        "count"
    ] == 3000 - len([n for n in range(3000) if n % 7 and n % 50 == 1])
    liked = await tables.query(table, where("customer", "like", "CUSTOMER-0%"))  # case-insensitive
    assert liked["count"] == len([n for n in range(3000) if n % 7 and n % 50 < 10])
    both = await tables.query(
        table, where("paid", "eq", True), where("amount", "lte", 30), combine="and"
    )
    either = await tables.query(
        table, where("paid", "eq", True), where("amount", "lte", 30), combine="or"
    )
    assert both["count"] == 11 and either["count"] == 1500 + 10
    june = await tables.query(
        table,
        where("due", "gte", "2026-06-01T00:00:00Z"),
        where("due", "lt", "2026-07-01T00:00:00Z"),
    )
    assert june["count"] == 250
    page = await tables.query(table, sortBy="amount", sortDirection="desc", limit=3, offset=1)
    assert [row["amount"] for row in page["data"]] == [4497.0, 4495.5, 4494.0]


async def test_updates_and_deletes_by_filter(tables: Tables) -> None:
    table = await orders(tables, 200)
    updated = await tables.call(
        "update-data-table-rows",
        dataTableId=table,
        filter={"type": "and", "filters": [where("paid", "eq", False), where("amount", "lt", 15)]},
        data={"paid": True, "customer": "settled"},
    )
    assert updated == {"updatedCount": 5}
    assert (await tables.query(table, where("customer", "eq", "settled")))["count"] == 5
    deleted = await tables.call(
        "delete-data-table-rows",
        dataTableId=table,
        filter={"filters": [where("amount", "gte", 150)]},
    )
    assert deleted == {"deletedCount": 100}
    assert (await tables.query(table))["count"] == 100
    empty = await tables.refused(
        "delete-data-table-rows", dataTableId=table, filter={"filters": []}
    )
    assert empty.code() is grpc.StatusCode.INVALID_ARGUMENT and "at least one condition" in (
        empty.details() or ""
    )
    assert (await tables.query(table))["count"] == 100  # nothing went


async def test_column_changes_migrate_the_table_and_keep_the_data(tables: Tables) -> None:
    table = await orders(tables, 10)
    added = await tables.call(
        "add-data-table-column", dataTableId=table, name="note", type="string"
    )
    column_id = added["column"]["id"]
    await tables.call(
        "update-data-table-rows",
        dataTableId=table,
        filter={"filters": [where("amount", "lt", 3)]},
        data={"note": "early"},
    )
    await tables.call(
        "rename-data-table-column", dataTableId=table, columnId=column_id, newName="remark"
    )
    assert (await tables.query(table, where("remark", "eq", "early")))["count"] == 2
    schema = await tables.call("get-data-table-schema", dataTableId=table)
    assert [c["name"] for c in schema["table"]["columns"]] == [
        "customer",
        "amount",
        "paid",
        "due",
        "remark",
    ]
    paid = next(c["id"] for c in schema["table"]["columns"] if c["name"] == "paid")
    await tables.call("delete-data-table-column", dataTableId=table, columnId=paid)
    row = (await tables.query(table, limit=1))["data"][0]
    assert "paid" not in row and row["remark"] == "early"
    gone = await tables.refused(
        "query-data-table-rows", dataTableId=table, filter={"filters": [where("paid", "eq", True)]}
    )
    assert gone.code() is grpc.StatusCode.INVALID_ARGUMENT and "unknown column 'paid'" in (
        gone.details() or ""
    )
    assert (await tables.call("delete-data-table", dataTableId=table)) == {"success": True}
    assert (await tables.call("list-data-tables"))["tables"] == []


@pytest.mark.parametrize(
    ("tool_name", "arguments", "code", "says"),
    [
        (
            "create-data-table",
            {"name": "t", "columns": [{"name": "x", "type": "json"}]},
            "INVALID_ARGUMENT",
            "columns.0.type",
        ),
        (
            "create-data-table",
            {"name": "t", "columns": [{"name": "id", "type": "string"}]},
            "INVALID_ARGUMENT",
            "reserved system column",
        ),
        (
            "create-data-table",
            {"name": "t", "columns": [{"name": "2x", "type": "string"}]},
            "INVALID_ARGUMENT",
            "not a valid column name",
        ),
        (
            "create-data-table",
            {"name": "t", "columns": [{"name": "a", "type": "string"}] * 2},
            "INVALID_ARGUMENT",
            "duplicate names",
        ),
        (
            "create-data-table",
            {"name": "orders", "columns": [{"name": "a", "type": "string"}]},
            "INVALID_ARGUMENT",
            "already exists",
        ),
        (
            "insert-data-table-rows",
            {"rows": [{"amount": "ten"}]},
            "INVALID_ARGUMENT",
            "rows.0.amount: expects a number",
        ),
        (
            "insert-data-table-rows",
            {"rows": [{"colour": "red"}]},
            "INVALID_ARGUMENT",
            "unknown column 'colour'",
        ),
        (
            "insert-data-table-rows",
            {"rows": [{"id": 4}]},
            "INVALID_ARGUMENT",
            "system columns are set automatically",
        ),
        (
            "insert-data-table-rows",
            {"rows": [{"due": "next tuesday"}]},
            "INVALID_ARGUMENT",
            "ISO 8601",
        ),
        (
            "query-data-table-rows",
            {"filter": {"filters": [where("nope", "eq", 1)]}},
            "INVALID_ARGUMENT",
            "unknown column 'nope'",
        ),
        (
            "query-data-table-rows",
            {"filter": {"filters": [where("amount", "like", "1%")]}},
            "INVALID_ARGUMENT",
            "like needs a string column",
        ),
        ("query-data-table-rows", {"sortBy": "nope"}, "INVALID_ARGUMENT", "unknown column 'nope'"),
        (
            "add-data-table-column",
            {"name": "amount", "type": "number"},
            "INVALID_ARGUMENT",
            "already exists",
        ),
        (
            "rename-data-table-column",
            {"columnId": "nope", "newName": "b"},
            "NOT_FOUND",
            "has no column 'nope'",
        ),
    ],
)
async def test_bad_input_names_the_field_and_changes_nothing(
    tables: Tables, tool_name: str, arguments: dict[str, Any], code: str, says: str
) -> None:
    table = await orders(tables, 3)
    before = await tables.call("get-data-table-schema", dataTableId=table)
    error = await tables.refused(
        tool_name,
        **({"dataTableId": table} | arguments if tool_name != "create-data-table" else arguments),
    )
    assert error.code().name == code
    assert says in (error.details() or "")
    assert await tables.call("get-data-table-schema", dataTableId=table) == before
    assert (await tables.query(table))["count"] == 3
    missing = await tables.refused("get-data-table-schema", dataTableId="nope")
    assert missing.code() is grpc.StatusCode.NOT_FOUND and "list-data-tables" in (
        missing.details() or ""
    )


async def test_gated_actions_need_approval(
    make_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    async with serving(make_settings(**with_model(model))) as (app, channel):
        tables = Tables(channel)
        denied = await tables.refused("create-data-table", name="t", columns=COLUMNS)
        assert denied.code() is grpc.StatusCode.FAILED_PRECONDITION and "createDataTable" in (
            denied.details() or ""
        )
        table = await app.parts.instance.data_tables.create("t", [("amount", "number")])
        await app.parts.instance.data_tables.insert(table.id, [{"amount": 1}, {"amount": 2}])
        model.script(
            tool(
                "delete-data-table-rows",
                {"dataTableId": table.id, "filter": {"filters": [where("amount", "eq", 1)]}},
            ),
            text("deleted"),
        )
        chat = Chat(channel)
        run_id = await chat.send("dt", "delete the first row")
        card = await chat.card("dt")
        assert card["severity"] == "destructive" and card["toolName"] == "delete-data-table-rows"
        assert (await app.parts.instance.data_tables.query(table.id))[0] == 2  # nothing yet
        await chat.confirm("dt", card["requestId"], kind="approval", approved=True)
        await chat.finished("dt", run_id)
        assert (await app.parts.instance.data_tables.query(table.id))[0] == 1
