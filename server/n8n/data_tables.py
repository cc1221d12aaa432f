"""Data tables kept in n8n (so n8n's Data Table node sees what the assistant wrote): tables,
columns and rows through the public API, with the tools' filters as n8n's."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from server.core.caller import INSTANCE_SCOPED
from server.errors import InvalidArgumentError, NotFoundError
from server.instance.rules import check_column_name, require_conditions
from server.instance.types import Column, DataTable, RowFilter
from server.n8n.client import N8nClient
from server.n8n.workflows import parse_time

__all__ = ["N8nDataTables"]

_TYPES = {"string", "number", "boolean", "date"}


class N8nDataTables:
    def __init__(self, client: N8nClient) -> None:
        self.client = client

    async def all(self, project_ids: list[str] | None = None) -> list[DataTable]:
        found = await self.client.pages("/data-tables")
        return sorted((_table(t) for t in found), key=lambda t: (t.created_at, t.id))

    async def get(self, table_id: str) -> DataTable:
        try:
            return _table(await self.client.get(f"/data-tables/{table_id}"))
        except NotFoundError:
            raise NotFoundError(
                f"there is no data table {table_id!r}; list-data-tables names them"
            ) from None

    async def create(
        self, name: str, columns: list[tuple[str, str]], *, project_id: str | None = None
    ) -> DataTable:
        for index, (column, kind) in enumerate(columns):
            check_column_name(column, f"columns.{index}.name")
            if kind not in _TYPES:
                raise InvalidArgumentError(
                    f"columns.{index}.type: {kind!r} is not a column type; use string, "
                    "number, boolean or date"
                )
        body = {"name": name, "columns": [{"name": n, "type": k} for n, k in columns]}
        return _table(await self.client.post("/data-tables", body))

    async def delete(self, table_id: str) -> None:
        await self.get(table_id)
        await self.client.delete(f"/data-tables/{table_id}")

    async def add_column(self, table_id: str, name: str, kind: str) -> Column:
        check_column_name(name, "name")
        await self.get(table_id)
        created = await self.client.post(
            f"/data-tables/{table_id}/columns", {"name": name, "type": kind}
        )
        return _column(created)

    async def rename_column(self, table_id: str, column_id: str, new_name: str) -> None:
        check_column_name(new_name, "newName")
        (await self.get(table_id)).column_by_id(column_id)
        await self.client.patch(f"/data-tables/{table_id}/columns/{column_id}", {"name": new_name})

    async def delete_column(self, table_id: str, column_id: str) -> None:
        (await self.get(table_id)).column_by_id(column_id)
        await self.client.delete(f"/data-tables/{table_id}/columns/{column_id}")

    async def query(
        self,
        table_id: str,
        *,
        row_filter: RowFilter | None = None,
        limit: int = 50,
        offset: int = 0,
        sort_by: str = "id",
        descending: bool = False,
    ) -> tuple[int, list[dict[str, Any]]]:
        """n8n pages by cursor and does not count: the matching rows are read in full pages,
        then counted and cut."""
        await self.get(table_id)
        path = f"/data-tables/{table_id}/rows"
        if row_filter is not None and row_filter.filters:
            path += f"?filter={_encoded(row_filter)}"
        rows = await self.client.pages(
            path, page_size=250, sortBy=f"{sort_by}:{'desc' if descending else 'asc'}"
        )
        return len(rows), rows[offset : offset + limit]

    async def insert(self, table_id: str, values: list[dict[str, Any]]) -> list[int]:
        await self.get(table_id)
        created = await self.client.post(
            f"/data-tables/{table_id}/rows", {"data": values, "returnType": "id"}
        )
        return [int(row["id"]) for row in created]

    async def update(self, table_id: str, row_filter: RowFilter, data: dict[str, Any]) -> int:
        require_conditions(row_filter, "update")
        if not data:
            raise InvalidArgumentError("data: give at least one column to set")
        await self.get(table_id)
        changed = await self.client.patch(
            f"/data-tables/{table_id}/rows/update",
            {"filter": _filter(row_filter), "data": data, "returnData": True},
        )
        return len(changed) if isinstance(changed, list) else 0

    async def delete_rows(self, table_id: str, row_filter: RowFilter) -> int:
        require_conditions(row_filter, "delete")
        await self.get(table_id)
        deleted = await self.client.delete(
            f"/data-tables/{table_id}/rows/delete?filter={_encoded(row_filter)}", returnData=True
        )
        return len(deleted) if isinstance(deleted, list) else 0


def _table(found: dict[str, Any]) -> DataTable:
    columns = sorted(found.get("columns") or [], key=lambda c: int(c.get("index") or 0))
    return DataTable(
        id=str(found["id"]),
        project_id=INSTANCE_SCOPED,
        name=str(found["name"]),
        columns=[
            Column(id=str(c["id"]), name=str(c["name"]), type=str(c["type"])) for c in columns
        ],
        created_at=parse_time(found.get("createdAt")),
        updated_at=parse_time(found.get("updatedAt")),
    )


def _encoded(row_filter: RowFilter) -> str:
    """A filter as n8n takes it in a query: JSON, percent-encoded in full (n8n refuses a value
    with reserved characters left in it, which a client's own encoding leaves)."""
    return quote(json.dumps(_filter(row_filter)), safe="")


def _column(found: dict[str, Any]) -> Column:
    return Column(id=str(found["id"]), name=str(found["name"]), type=str(found["type"]))


def _filter(row_filter: RowFilter) -> dict[str, Any]:
    """The tools' conditions as n8n's (which has no isEmpty: that is `eq null`)."""
    filters = []
    for rule in row_filter.filters:
        condition, value = rule.condition, rule.value
        if condition == "isEmpty":
            condition, value = "eq", None
        elif condition == "isNotEmpty":
            condition, value = "neq", None
        elif condition == "like":
            condition = "ilike"  # the tools' like is case-insensitive
        filters.append({"columnName": rule.column, "condition": condition, "value": value})
    return {"type": row_filter.combine, "filters": filters}
