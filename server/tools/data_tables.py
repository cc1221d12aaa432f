"""Data table tools: tables, columns and rows (through the instance seam)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from server.errors import NotFoundError
from server.instance import DataTables
from server.instance.types import Column as DomainColumn
from server.instance.types import DataTable, Filter, RowFilter
from server.tools.scope import check_project
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "DataTableTools"]

GROUP = "data-tables"
ColumnType = Literal["string", "number", "boolean", "date"]
TABLE_ID = Field(alias="dataTableId", min_length=1, description="ID of the data table")


@dataclass(frozen=True, kw_only=True)
class DataTableTools:
    """What the data table tools may touch."""

    data_tables: DataTables


class ColumnModel(ToolModel):
    id: str
    name: str
    type: str

    @classmethod
    def of(cls, column: DomainColumn) -> ColumnModel:
        return cls(id=column.id, name=column.name, type=column.type)


class TableModel(ToolModel):
    id: str
    name: str
    project_id: str = Field(alias="projectId")
    columns: list[ColumnModel]
    created_at: str = Field(alias="createdAt")
    updated_at: str = Field(alias="updatedAt")

    @classmethod
    def of(cls, table: DataTable) -> TableModel:
        return cls(
            id=table.id,
            name=table.name,
            project_id=table.project_id,
            columns=[ColumnModel.of(c) for c in table.columns],
            created_at=table.created_at.isoformat(),
            updated_at=table.updated_at.isoformat(),
        )


class NoInput(ToolModel):
    pass


class TablesOutput(ToolModel):
    tables: list[TableModel]


async def list_tables(ctx: ToolContext[DataTableTools], _args: NoInput) -> TablesOutput:
    tables = await ctx.services.data_tables.all(sorted(ctx.caller.project_ids))
    return TablesOutput(tables=[TableModel.of(t) for t in tables])


async def _visible(ctx: ToolContext[DataTableTools], table_id: str) -> DataTable:
    """The table, if the caller sees its project (else: as if it did not exist)."""
    table = await ctx.services.data_tables.get(table_id)
    if not ctx.caller.sees(table.project_id):
        raise NotFoundError(f"there is no data table {table_id!r}; list-data-tables names them")
    return table


class NewColumn(ToolModel):
    name: str = Field(description="Letters, digits, underscores; not id, createdAt, updatedAt")
    type: ColumnType


class CreateInput(ToolModel):
    name: str = Field(min_length=1, max_length=128, description="Table name")
    project_id: str | None = Field(
        None, alias="projectId", description="Project to create it in (default: personal)"
    )
    columns: list[NewColumn] = Field(min_length=1, max_length=100)


class TableOutput(ToolModel):
    table: TableModel


async def create_table(ctx: ToolContext[DataTableTools], args: CreateInput) -> TableOutput:
    table = await ctx.services.data_tables.create(
        args.name,
        [(c.name, c.type) for c in args.columns],
        project_id=check_project(ctx.caller, args.project_id),
    )
    return TableOutput(table=TableModel.of(table))


class TableInput(ToolModel):
    data_table_id: str = TABLE_ID


class SuccessOutput(ToolModel):
    success: bool


async def delete_table(ctx: ToolContext[DataTableTools], args: TableInput) -> SuccessOutput:
    await _visible(ctx, args.data_table_id)
    await ctx.services.data_tables.delete(args.data_table_id)
    return SuccessOutput(success=True)


async def get_schema(ctx: ToolContext[DataTableTools], args: TableInput) -> TableOutput:
    return TableOutput(table=TableModel.of(await _visible(ctx, args.data_table_id)))


class AddColumnInput(ToolModel):
    data_table_id: str = TABLE_ID
    name: str
    type: ColumnType


class ColumnOutput(ToolModel):
    column: ColumnModel


async def add_column(ctx: ToolContext[DataTableTools], args: AddColumnInput) -> ColumnOutput:
    await _visible(ctx, args.data_table_id)
    column = await ctx.services.data_tables.add_column(args.data_table_id, args.name, args.type)
    return ColumnOutput(column=ColumnModel.of(column))


class ColumnInput(ToolModel):
    data_table_id: str = TABLE_ID
    column_id: str = Field(alias="columnId", min_length=1, description="From the table schema")


async def delete_column(ctx: ToolContext[DataTableTools], args: ColumnInput) -> SuccessOutput:
    await _visible(ctx, args.data_table_id)
    await ctx.services.data_tables.delete_column(args.data_table_id, args.column_id)
    return SuccessOutput(success=True)


class RenameColumnInput(ColumnInput):
    new_name: str = Field(alias="newName")


async def rename_column(ctx: ToolContext[DataTableTools], args: RenameColumnInput) -> SuccessOutput:
    await _visible(ctx, args.data_table_id)
    await ctx.services.data_tables.rename_column(args.data_table_id, args.column_id, args.new_name)
    return SuccessOutput(success=True)


class Condition(ToolModel):
    column_name: str = Field(alias="columnName")
    condition: Literal["eq", "neq", "like", "gt", "gte", "lt", "lte", "isEmpty", "isNotEmpty"] = (
        Field(description="like: case-insensitive, % and _ as wildcards; isEmpty needs no value")
    )
    value: str | float | bool | None = None


class FilterModel(ToolModel):
    type: Literal["and", "or"] = Field("and", description="Combine the conditions with")
    filters: list[Condition] = Field(max_length=50)

    def to_domain(self) -> RowFilter:
        return RowFilter(
            combine=self.type,
            filters=[
                Filter(column=f.column_name, condition=f.condition, value=f.value)
                for f in self.filters
            ],
        )


class QueryInput(ToolModel):
    data_table_id: str = TABLE_ID
    filter: FilterModel | None = None
    limit: int = Field(50, ge=1, le=100, description="Rows to return (default 50)")
    offset: int = Field(0, ge=0, description="Rows to skip")
    sort_by: str = Field("id", alias="sortBy", description="Column to sort by")
    sort_direction: Literal["asc", "desc"] = Field("asc", alias="sortDirection")


class QueryOutput(ToolModel):
    count: int
    data: list[dict[str, Any]]
    hint: str | None = None


async def query_rows(ctx: ToolContext[DataTableTools], args: QueryInput) -> QueryOutput:
    await _visible(ctx, args.data_table_id)
    count, rows = await ctx.services.data_tables.query(
        args.data_table_id,
        row_filter=args.filter.to_domain() if args.filter else None,
        limit=args.limit,
        offset=args.offset,
        sort_by=args.sort_by,
        descending=args.sort_direction == "desc",
    )
    remaining = count - args.offset - len(rows)
    hint = (
        f"{remaining} more rows: page on with offset {args.offset + len(rows)}"
        if remaining > 0
        else None
    )
    return QueryOutput(count=count, data=rows, hint=hint)


class InsertInput(ToolModel):
    data_table_id: str = TABLE_ID
    rows: list[dict[str, Any]] = Field(
        min_length=1, max_length=100, description="Row objects: column name → value"
    )


class InsertOutput(ToolModel):
    inserted_count: int = Field(alias="insertedCount")
    ids: list[int]


async def insert_rows(ctx: ToolContext[DataTableTools], args: InsertInput) -> InsertOutput:
    await _visible(ctx, args.data_table_id)
    ids = await ctx.services.data_tables.insert(args.data_table_id, args.rows)
    return InsertOutput(inserted_count=len(ids), ids=ids)


class UpdateInput(ToolModel):
    data_table_id: str = TABLE_ID
    filter: FilterModel = Field(description="Which rows to update (at least one condition)")
    data: dict[str, Any] = Field(description="Column values to set on every matching row")


class UpdateOutput(ToolModel):
    updated_count: int = Field(alias="updatedCount")


async def update_rows(ctx: ToolContext[DataTableTools], args: UpdateInput) -> UpdateOutput:
    await _visible(ctx, args.data_table_id)
    count = await ctx.services.data_tables.update(
        args.data_table_id, args.filter.to_domain(), args.data
    )
    return UpdateOutput(updated_count=count)


class DeleteRowsInput(ToolModel):
    data_table_id: str = TABLE_ID
    filter: FilterModel = Field(description="Which rows to delete (at least one condition)")


class DeleteRowsOutput(ToolModel):
    deleted_count: int = Field(alias="deletedCount")


async def delete_rows(ctx: ToolContext[DataTableTools], args: DeleteRowsInput) -> DeleteRowsOutput:
    await _visible(ctx, args.data_table_id)
    count = await ctx.services.data_tables.delete_rows(args.data_table_id, args.filter.to_domain())
    return DeleteRowsOutput(deleted_count=count)


_OPERATIONS = {
    "create-data-table": "create",
    "delete-data-table": "delete",
    "add-data-table-column": "add-column",
    "delete-data-table-column": "delete-column",
    "rename-data-table-column": "rename-column",
    "insert-data-table-rows": "insert-rows",
    "update-data-table-rows": "update-rows",
    "delete-data-table-rows": "delete-rows",
}


def _tool(
    name: str, description: str, input_model: Any, output_model: Any, handler: Any, **gate: Any
) -> ToolSpec[Any]:
    if "hitl_action" in gate:
        # "Allow for this session" covers the operation on every table, as the reference's
        # `data-tables:<operation>` grants do (a person approves inserting rows, not a table).
        operation = _OPERATIONS[name]
        gate["grant"] = lambda _args: f"data-tables:{operation}"
    return ToolSpec(
        name=name,
        description=description,
        group=GROUP,
        services=DataTableTools,
        input_model=input_model,
        output_model=output_model,
        handler=handler,
        **gate,
    )


TOOLS: list[ToolSpec[Any]] = [
    _tool(
        "list-data-tables",
        "List the data tables with their columns.",
        NoInput,
        TablesOutput,
        list_tables,
    ),
    _tool(
        "create-data-table",
        "Create a data table with typed columns (string, number, boolean, date). Column names: "
        "letters, digits and underscores, starting with a letter. RESERVED: id, createdAt, "
        "updatedAt are system columns, managed automatically.",
        CreateInput,
        TableOutput,
        create_table,
        hitl_action="createDataTable",
        severity="info",
    ),
    _tool(
        "delete-data-table",
        "Delete a data table and all its rows (irreversible).",
        TableInput,
        SuccessOutput,
        delete_table,
        hitl_action="deleteDataTable",
        severity="destructive",
    ),
    _tool(
        "get-data-table-schema",
        "A data table's columns (with their ids) and metadata.",
        TableInput,
        TableOutput,
        get_schema,
    ),
    _tool(
        "add-data-table-column",
        "Add a typed column to a data table (existing rows get null).",
        AddColumnInput,
        ColumnOutput,
        add_column,
        hitl_action="mutateDataTableSchema",
    ),
    _tool(
        "delete-data-table-column",
        "Remove a column and its values from a data table.",
        ColumnInput,
        SuccessOutput,
        delete_column,
        hitl_action="mutateDataTableSchema",
        severity="destructive",
    ),
    _tool(
        "rename-data-table-column",
        "Rename a column of a data table (values are kept).",
        RenameColumnInput,
        SuccessOutput,
        rename_column,
        hitl_action="mutateDataTableSchema",
    ),
    _tool(
        "query-data-table-rows",
        "Query rows with an optional filter (conditions combined with and/or), sorting and "
        "paging. Returns the number of matching rows and one page.",
        QueryInput,
        QueryOutput,
        query_rows,
    ),
    _tool(
        "insert-data-table-rows",
        "Insert up to 100 rows (objects: column name → value).",
        InsertInput,
        InsertOutput,
        insert_rows,
        hitl_action="mutateDataTableRows",
    ),
    _tool(
        "update-data-table-rows",
        "Set the same column values on every row matching the filter.",
        UpdateInput,
        UpdateOutput,
        update_rows,
        hitl_action="mutateDataTableRows",
    ),
    _tool(
        "delete-data-table-rows",
        "Delete the rows matching the filter (a filter is required).",
        DeleteRowsInput,
        DeleteRowsOutput,
        delete_rows,
        hitl_action="mutateDataTableRows",
        severity="destructive",
    ),
]
