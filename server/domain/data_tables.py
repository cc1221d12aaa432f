"""User data tables: typed columns, filtered and paged queries, batch writes.

Each data table is a real SQL table (`data_table_user_<id>`) beside its metadata row, so
queries, filters and sorting run in the database, and a column change is an ALTER TABLE in
the same transaction as the metadata change. The system columns `id`, `createdAt` and
`updatedAt` are managed here; user columns are `string`, `number`, `boolean` or `date`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core.caller import DEFAULT_PROJECT
from server.errors import InvalidArgumentError, NotFoundError
from server.instance.rules import check_column_name, require_conditions
from server.instance.types import (
    SYSTEM_COLUMNS,
    Column,
    DataTable,
    Filter,
    RowFilter,
)
from server.store import Database
from server.store.models import DataTableColumnRow, DataTableRow, UTCDateTime

__all__ = [
    "COLUMNS",
    "META",
    "SQL_TYPES",
    "DataTableStore",
    "coerce",
]

SQL_TYPES: dict[str, Any] = {
    "string": sa.Text(),
    "number": sa.Double(),
    "boolean": sa.Boolean(),
    "date": UTCDateTime(),
}
META = DataTableRow.metadata.tables["data_tables"]
COLUMNS = DataTableColumnRow.metadata.tables["data_table_columns"]


def coerce(kind: str, value: Any, field: str) -> Any:
    """A JSON value as the column stores it; a clear error when it does not fit."""
    if value is None:
        return None
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    expected = {"date": "an ISO 8601 date string"}.get(kind, f"a {kind}")
    raise InvalidArgumentError(f"{field}: expects {expected} (or null), got {value!r}")


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class DataTableStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- tables ---------------------------------------------------------------------------

    async def all(self, project_ids: list[str] | None = None) -> list[DataTable]:
        async with self.db.engine.connect() as conn:
            query = sa.select(META.c.id).order_by(META.c.created_at, META.c.id)
            if project_ids is not None:
                query = query.where(META.c.project_id.in_(project_ids))
            ids = list((await conn.execute(query)).scalars())
            return [await self._load(conn, table_id) for table_id in ids]

    async def get(self, table_id: str) -> DataTable:
        async with self.db.engine.connect() as conn:
            return await self._load(conn, table_id)

    async def create(
        self, name: str, columns: list[tuple[str, str]], *, project_id: str = DEFAULT_PROJECT
    ) -> DataTable:
        names = [n for n, _ in columns]
        for index, (column, kind) in enumerate(columns):
            check_column_name(column, f"columns.{index}.name")
            if kind not in SQL_TYPES:
                raise InvalidArgumentError(
                    f"columns.{index}.type: {kind!r} is not a column type; use string, "
                    "number, boolean or date"
                )
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise InvalidArgumentError(f"columns: duplicate names {duplicates}")
        table_id = uuid.uuid4().hex[:16]
        now = datetime.now(UTC)
        async with self.db.engine.begin() as conn:
            taken = await conn.execute(
                sa.select(META.c.id).where(META.c.project_id == project_id, META.c.name == name)
            )
            if taken.first() is not None:
                raise InvalidArgumentError(
                    f"name: a data table named {name!r} already exists in this project; "
                    "choose another name or use the existing table"
                )
            await conn.execute(
                META.insert().values(
                    id=table_id, project_id=project_id, name=name, created_at=now, updated_at=now
                )
            )
            await conn.execute(
                COLUMNS.insert(),
                [
                    {"id": _column_id(), "table_id": table_id, "name": n, "type": t, "position": i}
                    for i, (n, t) in enumerate(columns)
                ],
            )
            table = await self._load(conn, table_id)
            await conn.run_sync(lambda sync: _physical(table).create(sync))
        return table

    async def delete(self, table_id: str) -> None:
        async with self.db.engine.begin() as conn:
            table = await self._load(conn, table_id)
            await conn.run_sync(lambda sync: _physical(table).drop(sync))
            await conn.execute(COLUMNS.delete().where(COLUMNS.c.table_id == table_id))
            await conn.execute(META.delete().where(META.c.id == table_id))

    # -- columns (schema changes: ALTER TABLE with the metadata, in one transaction) ------

    async def add_column(self, table_id: str, name: str, kind: str) -> Column:
        check_column_name(name)
        if kind not in SQL_TYPES:
            raise InvalidArgumentError(f"type: {kind!r}: use string, number, boolean or date")
        async with self.db.engine.begin() as conn:
            table = await self._load(conn, table_id)
            if table.column(name) is not None:
                raise InvalidArgumentError(f"name: column {name!r} already exists")
            column = Column(id=_column_id(), name=name, type=kind)
            await conn.execute(
                COLUMNS.insert().values(
                    id=column.id,
                    table_id=table_id,
                    name=name,
                    type=kind,
                    position=len(table.columns),
                )
            )
            sql_type = SQL_TYPES[kind].compile(dialect=conn.dialect)
            await _alter(conn, table, f"ADD COLUMN {_quote(conn, name)} {sql_type}")
            await self._touch(conn, table_id)
        return column

    async def rename_column(self, table_id: str, column_id: str, new_name: str) -> None:
        check_column_name(new_name, "newName")
        async with self.db.engine.begin() as conn:
            table = await self._load(conn, table_id)
            column = table.column_by_id(column_id)
            if table.column(new_name) is not None:
                raise InvalidArgumentError(f"newName: column {new_name!r} already exists")
            await conn.execute(
                COLUMNS.update().where(COLUMNS.c.id == column_id).values(name=new_name)
            )
            await _alter(
                conn,
                table,
                f"RENAME COLUMN {_quote(conn, column.name)} TO {_quote(conn, new_name)}",
            )
            await self._touch(conn, table_id)

    async def delete_column(self, table_id: str, column_id: str) -> None:
        async with self.db.engine.begin() as conn:
            table = await self._load(conn, table_id)
            column = table.column_by_id(column_id)
            await conn.execute(COLUMNS.delete().where(COLUMNS.c.id == column_id))
            await _alter(conn, table, f"DROP COLUMN {_quote(conn, column.name)}")
            await self._touch(conn, table_id)

    # -- rows -----------------------------------------------------------------------------

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
        """The number of matching rows, and one page of them."""
        async with self.db.engine.connect() as conn:
            table = await self._load(conn, table_id)
            rows = _physical(table)
            where = _where(table, rows, row_filter)
            table.type_of(sort_by)  # refuses an unknown column by name
            order = rows.c[sort_by].desc() if descending else rows.c[sort_by].asc()
            count = await conn.scalar(sa.select(sa.func.count()).select_from(rows).where(where))
            page = await conn.execute(
                sa.select(rows).where(where).order_by(order, rows.c.id).limit(limit).offset(offset)
            )
            return int(count or 0), [
                {k: _json_value(v) for k, v in row._mapping.items()} for row in page
            ]

    async def insert(self, table_id: str, values: list[dict[str, Any]]) -> list[int]:
        async with self.db.engine.begin() as conn:
            table = await self._load(conn, table_id)
            now = datetime.now(UTC)
            prepared = [
                {c.name: None for c in table.columns}
                | _values(table, row, f"rows.{index}")
                | {"createdAt": now, "updatedAt": now}
                for index, row in enumerate(values)
            ]
            rows = _physical(table)
            inserted = await conn.execute(rows.insert().returning(rows.c.id), prepared)
            ids = [int(i) for i in inserted.scalars()]
            await self._touch(conn, table_id)
            return ids

    async def update(self, table_id: str, row_filter: RowFilter, data: dict[str, Any]) -> int:
        require_conditions(row_filter, "update")
        if not data:
            raise InvalidArgumentError("data: give at least one column to set")
        async with self.db.engine.begin() as conn:
            table = await self._load(conn, table_id)
            rows = _physical(table)
            changes = _values(table, data, "data") | {"updatedAt": datetime.now(UTC)}
            done = await conn.execute(
                rows.update().where(_where(table, rows, row_filter)).values(**changes)
            )
            await self._touch(conn, table_id)
            return int(done.rowcount)

    async def delete_rows(self, table_id: str, row_filter: RowFilter) -> int:
        require_conditions(row_filter, "delete")
        async with self.db.engine.begin() as conn:
            table = await self._load(conn, table_id)
            rows = _physical(table)
            done = await conn.execute(rows.delete().where(_where(table, rows, row_filter)))
            await self._touch(conn, table_id)
            return int(done.rowcount)

    # -- helpers --------------------------------------------------------------------------

    async def _load(self, conn: AsyncConnection, table_id: str) -> DataTable:
        found = (await conn.execute(sa.select(META).where(META.c.id == table_id))).first()
        if found is None:
            raise NotFoundError(f"there is no data table {table_id!r}; list-data-tables names them")
        columns = await conn.execute(
            sa.select(COLUMNS).where(COLUMNS.c.table_id == table_id).order_by(COLUMNS.c.position)
        )
        return DataTable(
            id=found.id,
            project_id=found.project_id,
            name=found.name,
            columns=[Column(id=c.id, name=c.name, type=c.type) for c in columns],
            created_at=found.created_at,
            updated_at=found.updated_at,
        )

    @staticmethod
    async def _touch(conn: AsyncConnection, table_id: str) -> None:
        await conn.execute(
            META.update().where(META.c.id == table_id).values(updated_at=datetime.now(UTC))
        )


def _column_id() -> str:
    return uuid.uuid4().hex[:16]


def _sql_name(table_id: str) -> str:
    return f"data_table_user_{table_id}"


def _physical(table: DataTable) -> sa.Table:
    """The SQL table holding the rows, as SQLAlchemy sees it."""
    return sa.Table(
        _sql_name(table.id),
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("createdAt", UTCDateTime(), nullable=False),
        sa.Column("updatedAt", UTCDateTime(), nullable=False),
        *(sa.Column(c.name, SQL_TYPES[c.type], nullable=True) for c in table.columns),
    )


def _quote(conn: AsyncConnection, name: str) -> str:
    return str(conn.dialect.identifier_preparer.quote(name))


async def _alter(conn: AsyncConnection, table: DataTable, change: str) -> None:
    # Identifiers are validated names, quoted by the dialect; nothing else is interpolated.
    await conn.execute(sa.text(f"ALTER TABLE {_quote(conn, _sql_name(table.id))} {change}"))


def _values(table: DataTable, row: dict[str, Any], field: str) -> dict[str, Any]:
    out = {}
    for name, value in row.items():
        if name in SYSTEM_COLUMNS:
            raise InvalidArgumentError(f"{field}.{name}: system columns are set automatically")
        out[name] = coerce(table.type_of(name), value, f"{field}.{name}")
    return out


def _where(table: DataTable, rows: sa.Table, row_filter: RowFilter | None) -> Any:
    if row_filter is None or not row_filter.filters:
        return sa.true()
    clauses = [
        _condition(table, rows, f, f"filter.filters.{i}") for i, f in enumerate(row_filter.filters)
    ]
    return sa.and_(*clauses) if row_filter.combine == "and" else sa.or_(*clauses)


def _condition(table: DataTable, rows: sa.Table, rule: Filter, field: str) -> Any:
    kind = table.type_of(rule.column)
    column = rows.c[rule.column]
    if rule.condition in ("isEmpty", "isNotEmpty"):
        empty = sa.or_(column.is_(None), column == "") if kind == "string" else column.is_(None)
        return empty if rule.condition == "isEmpty" else sa.not_(empty)
    if rule.condition == "like":
        if kind != "string" or not isinstance(rule.value, str):
            raise InvalidArgumentError(f"{field}: like needs a string column and a string value")
        return column.ilike(rule.value)
    value = coerce(kind, rule.value, f"{field}.value")
    if rule.condition == "eq":
        return column.is_(None) if value is None else column == value
    if rule.condition == "neq":
        return column.is_not(None) if value is None else sa.or_(column != value, column.is_(None))
    if value is None or kind == "boolean":
        raise InvalidArgumentError(
            f"{field}: {rule.condition} compares numbers, dates or strings, not {value!r}"
        )
    operators = {"gt": "__gt__", "gte": "__ge__", "lt": "__lt__", "lte": "__le__"}
    if rule.condition not in operators:
        raise InvalidArgumentError(f"{field}.condition: unknown condition {rule.condition!r}")
    return getattr(column, operators[rule.condition])(value)
