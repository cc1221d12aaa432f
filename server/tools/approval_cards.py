"""What each gated tool's approval card says: a one-line `message` of the concrete effect,
the `resourceName` the card's title shows (a workflow's or a table's name, never a bare id
when the name can be found), the contract's `approvalDetails` (`@n8n/api-types`'s
`instanceAiApprovalDetailsSchema`: the table's column, the rows to be written or deleted, the
filter, the workflow archived or published ...) and the severity, as the reference's tools
word them. A person decides from the card alone, so it names what will change, not the tool.

Built from the call's parsed arguments and the tool's own services (to look a name up); a
lookup that fails falls back to the id, never fails the call."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from server.core.caller import Caller

__all__ = ["APPROVAL_SUMMARY", "Card", "card_for", "one_line_summary", "workflow_name"]

# The `approvalSummary` argument of the tools whose effect only the model can put in words
# (a build's edits, a live run, a publish): the card shows it instead of the generic line.
APPROVAL_SUMMARY: dict[str, Any] = {
    "max_length": 300,
    "description": "A short plain-language line for the approval card, in the user's "
    "language: the concrete change or effect of this call (the nodes affected, what a live "
    "run will do), without the workflow's name or id or later plans. E.g. 'Send a Slack "
    "message after the payment check'.",
}

MAX_DESCRIBED_COLUMNS = 5
MAX_DESCRIBED_ROWS = 3
MAX_PREVIEW_CHARS = 100


@dataclass(frozen=True, kw_only=True)
class Card:
    message: str
    severity: str
    resource_name: str | None = None
    approval_details: dict[str, Any] | None = None
    input_type: str = "approval"
    resource_decision: dict[str, Any] | None = None

    def question(self) -> dict[str, Any]:
        """The card as `confirmation-request` fields."""
        question: dict[str, Any] = {
            "inputType": self.input_type,
            "message": self.message,
            "severity": self.severity,
        }
        if self.resource_decision is not None:
            question["resourceDecision"] = self.resource_decision
        if self.resource_name:
            question["resourceName"] = self.resource_name
        if self.approval_details is not None:
            question["approvalDetails"] = self.approval_details
        return question


def one_line_summary(summary: str | None, fallback: str) -> str:
    """The model's `approvalSummary` on one line, else what the tool says of itself."""
    line = " ".join((summary or "").split())
    return line or fallback


Builder = Callable[[Any, Any, Caller], Awaitable[Card]]


async def card_for(
    name: str, hitl_action: str | None, services: Any, args: Any, caller: Caller
) -> Card | None:
    builder = BUILDERS.get(name)
    if builder is not None:
        return await builder(services, args, caller)
    if hitl_action == GATEWAY_ACTION:
        return gateway_card(name, args)
    return None


# -- the user's own machine (a filesystem gateway's tools) -----------------------------------

GATEWAY_ACTION = "readFilesystem"
RESOURCE_OPTIONS = ["denyOnce", "allowOnce", "allowForSession"]


def gateway_card(name: str, args: Any) -> Card:
    """A gateway tool reaches into the person's machine: the reference asks with its
    resource-decision card (deny, allow once, allow for the session) naming the resource."""
    values = args if isinstance(args, dict) else {}
    resource = next(
        (
            str(values[key])
            for key in ("path", "dir", "directory", "file", "pattern")
            if values.get(key)
        ),
        name,
    )
    description = f"{name} on {resource}" if resource != name else name
    return Card(
        message=f"{name}: {description}",
        severity="warning",
        input_type="resource-decision",
        resource_decision={
            "toolGroup": "filesystem",
            "resource": resource,
            "description": description,
            "options": RESOURCE_OPTIONS,
        },
    )


# -- names ----------------------------------------------------------------------------------


async def workflow_name(services: Any, workflow_id: str, caller: Caller) -> str:
    try:
        workflow = await services.workflows.get(workflow_id, caller)
    except Exception:  # a card never fails the call: the id stands in
        return workflow_id
    return workflow.name if workflow is not None and workflow.name else workflow_id


async def _table_name(services: Any, table_id: str) -> str:
    try:
        return str((await services.data_tables.get(table_id)).name)
    except Exception:  # a card never fails the call: the id stands in
        return table_id


async def _table_and_column(services: Any, table_id: str, column_id: str) -> tuple[str, str]:
    """The table's and the column's names, from one read of the table."""
    try:
        table = await services.data_tables.get(table_id)
    except Exception:  # a card never fails the call: the ids stand in
        return table_id, column_id
    column = next((c.name for c in table.columns if column_id in (c.id, c.name)), column_id)
    return str(table.name), column


# -- data tables ----------------------------------------------------------------------------


def _preview_value(value: Any) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{text[:MAX_PREVIEW_CHARS]}…" if len(text) > MAX_PREVIEW_CHARS else text


def preview_row(data: dict[str, Any]) -> dict[str, Any]:
    entries = list(data.items())
    return {
        "values": [
            {"column": column, "value": _preview_value(value)}
            for column, value in entries[:MAX_DESCRIBED_COLUMNS]
        ],
        "remainingColumns": max(0, len(entries) - MAX_DESCRIBED_COLUMNS),
    }


def _describe_changes(data: dict[str, Any]) -> str:
    preview = preview_row(data)
    described = [f'"{v["column"]}" to {v["value"] or "no value"}' for v in preview["values"]]
    if remaining := preview["remainingColumns"]:
        described.append(f"{remaining} more {'column' if remaining == 1 else 'columns'}")
    return ", ".join(described)


_CONDITION_WORDS = {
    "eq": "is",
    "neq": "is not",
    "like": "matches the text pattern",
    "gt": "is greater than",
    "gte": "is greater than or equal to",
    "lt": "is less than",
    "lte": "is less than or equal to",
}


def filter_preview(row_filter: Any) -> dict[str, Any]:
    """The contract's filter preview; its conditions have no isEmpty: that is `eq` null."""
    conditions = []
    for f in row_filter.filters:
        condition, value = f.condition, f.value
        if condition in ("isEmpty", "isNotEmpty"):
            condition, value = ("eq" if condition == "isEmpty" else "neq"), None
        elif isinstance(value, float) and value.is_integer():
            value = int(value)  # as the model wrote it: 10, not 10.0
        conditions.append({"columnName": f.column_name, "condition": condition, "value": value})
    return {"type": row_filter.type, "filters": conditions}


def _describe_filter(preview: dict[str, Any]) -> str:
    parts = []
    for f in preview["filters"]:
        column, condition, value = f["columnName"], f["condition"], f["value"]
        if value is None and condition in ("eq", "neq"):
            parts.append(f'"{column}" {"has no value" if condition == "eq" else "has a value"}')
        else:
            parts.append(f'"{column}" {_CONDITION_WORDS[condition]} {json.dumps(value)}')
    return f" {preview['type']} ".join(parts) or "any condition"


async def _create_table(services: Any, args: Any, caller: Caller) -> Card:
    count = len(args.columns)
    names = ", ".join(f'"{c.name}"' for c in args.columns)
    message = f"Create the table with {count} {'column' if count == 1 else 'columns'}: {names}"
    if args.project_id:
        message += f' in project "{args.project_id}"'
    return Card(message=message, severity="info", resource_name=args.name)


async def _delete_table(services: Any, args: Any, caller: Caller) -> Card:
    return Card(
        message="Permanently delete the table and all its rows",
        severity="destructive",
        resource_name=await _table_name(services, args.data_table_id),
        approval_details={"action": "delete-table"},
    )


async def _add_column(services: Any, args: Any, caller: Caller) -> Card:
    return Card(
        message=f'Add column "{args.name}" ({args.type})',
        severity="warning",
        resource_name=await _table_name(services, args.data_table_id),
        approval_details={"action": "add-column", "column": args.name, "columnType": args.type},
    )


async def _delete_column(services: Any, args: Any, caller: Caller) -> Card:
    table, column = await _table_and_column(services, args.data_table_id, args.column_id)
    return Card(
        message=f'Delete column "{column}" and its values',
        severity="destructive",
        resource_name=table,
        approval_details={"action": "delete-column", "column": column},
    )


async def _rename_column(services: Any, args: Any, caller: Caller) -> Card:
    table, column = await _table_and_column(services, args.data_table_id, args.column_id)
    return Card(
        message=f'Rename column "{column}" to "{args.new_name}"',
        severity="warning",
        resource_name=table,
        approval_details={"action": "rename-column", "column": column, "newName": args.new_name},
    )


async def _insert_rows(services: Any, args: Any, caller: Caller) -> Card:
    rows: list[dict[str, Any]] = args.rows
    described = [
        f"Row {index}: "
        + (f"set {changes}" if (changes := _describe_changes(row)) else "no values")
        for index, row in enumerate(rows[:MAX_DESCRIBED_ROWS], start=1)
    ]
    if (remaining := len(rows) - len(described)) > 0:
        described.append(f"{remaining} more {'row' if remaining == 1 else 'rows'}")
    count = len(rows)
    return Card(
        message=f"Add {count} {'row' if count == 1 else 'rows'}\n\n" + "\n\n".join(described),
        severity="warning",
        resource_name=await _table_name(services, args.data_table_id),
        approval_details={
            "action": "insert-rows",
            "count": count,
            "rows": [preview_row(row) for row in rows[:MAX_DESCRIBED_ROWS]],
        },
    )


async def _update_rows(services: Any, args: Any, caller: Caller) -> Card:
    where = filter_preview(args.filter)
    scope = f"in rows where {_describe_filter(where)}" if where["filters"] else "in all rows"
    return Card(
        message=f"Set {_describe_changes(args.data)} {scope}",
        severity="warning",
        resource_name=await _table_name(services, args.data_table_id),
        approval_details={
            "action": "update-rows",
            "changes": preview_row(args.data),
            "filter": where,
        },
    )


async def _delete_rows(services: Any, args: Any, caller: Caller) -> Card:
    where = filter_preview(args.filter)
    return Card(
        message=f"Delete rows where {_describe_filter(where)}",
        severity="destructive",
        resource_name=await _table_name(services, args.data_table_id),
        approval_details={"action": "delete-rows", "filter": where},
    )


# -- workflows ------------------------------------------------------------------------------


def _named_workflow_card(verb: str, action: str, severity: str = "warning") -> Builder:
    async def build(services: Any, args: Any, caller: Caller) -> Card:
        name = await workflow_name(services, args.workflow_id, caller)
        return Card(
            message=f"{verb} {name} (ID: {args.workflow_id})",
            severity=severity,
            resource_name=name,
            approval_details={"action": action, "name": name, "id": args.workflow_id},
        )

    return build


async def _summarised(
    services: Any, args: Any, caller: Caller, fallback: str, details: dict[str, Any]
) -> Card:
    """A card whose line is the model's `approvalSummary` when it gave one."""
    summary = getattr(args, "approval_summary", None)
    if summary:
        details = details | {"summary": summary}
    return Card(
        message=one_line_summary(summary, fallback),
        severity="warning",
        resource_name=await workflow_name(services, args.workflow_id, caller),
        approval_details=details,
    )


async def _publish(services: Any, args: Any, caller: Caller) -> Card:
    selected = args.version_id is not None
    return await _summarised(
        services,
        args,
        caller,
        f"Make the {'selected version' if selected else 'latest draft'} live",
        {"action": "publish-workflow", "selectedVersion": selected, "supportingCount": 0},
    )


async def _restore_version(services: Any, args: Any, caller: Caller) -> Card:
    return Card(
        message=f"Restore to version {args.version_id}",
        severity="warning",
        resource_name=await workflow_name(services, args.workflow_id, caller),
        approval_details={"action": "restore-version", "version": args.version_id},
    )


async def _update_version(services: Any, args: Any, caller: Caller) -> Card:
    changes = [f'name to "{args.name}"' if args.name is not None else "no name"]
    if args.description is not None:
        changes.append("the description")
    return Card(
        message=f"Version {args.version_id}: change " + " and ".join(changes),
        severity="warning",
        resource_name=await workflow_name(services, args.workflow_id, caller),
        approval_details={
            "action": "update-version",
            "version": args.version_id,
            "name": args.name,
            "description": args.description,
        },
    )


async def _run(services: Any, args: Any, caller: Caller) -> Card:
    trigger = args.trigger_node_name
    fallback = "Run this workflow live" + (f' from "{trigger}"' if trigger else "")
    details: dict[str, Any] = {"action": "run-workflow"} | ({"trigger": trigger} if trigger else {})
    return await _summarised(services, args, caller, fallback, details)


async def _execute_node(services: Any, args: Any, caller: Caller) -> Card:
    what = args.type.rsplit(".", 1)[-1]
    operation = "/".join(
        str(args.parameters[key]) for key in ("resource", "operation") if args.parameters.get(key)
    )
    return Card(
        message=f'Run the node "{what}"' + (f" ({operation})" if operation else "") + " once",
        severity="warning",
    )


async def _tag(services: Any, args: Any, caller: Caller) -> Card:
    name = args.workflow_name or await workflow_name(services, args.workflow_id, caller)
    return Card(
        message=f"Tag {name} (ID: {args.workflow_id}) with [{', '.join(args.tags)}]",
        severity="info",
        resource_name=name,
    )


async def _cleanup(services: Any, args: Any, caller: Caller) -> Card:
    name = args.workflow_name or await workflow_name(services, args.workflow_id, caller)
    hours = f"{args.older_than_hours:g}"
    return Card(
        message=f"Delete executions for {name} older than {hours} hour(s)",
        severity="warning",
        resource_name=name,
    )


async def _create_folder(services: Any, args: Any, caller: Caller) -> Card:
    project = args.project_id or "your personal project"
    return Card(message=f"Create {args.name} in project {project}", severity="info")


async def _delete_folder(services: Any, args: Any, caller: Caller) -> Card:
    return Card(message=f"Delete folder {args.folder_id}", severity="destructive")


async def _move(services: Any, args: Any, caller: Caller) -> Card:
    name = await workflow_name(services, args.workflow_id, caller)
    where = f"folder {args.folder_id}" if args.folder_id else "the project's root"
    return Card(message=f"Move {name} to {where}", severity="info", resource_name=name)


async def _delete_credential(services: Any, args: Any, caller: Caller) -> Card:
    name = args.credential_id
    with contextlib.suppress(Exception):  # a card never fails the call: the id stands in
        name = (await services.credentials.get(args.credential_id)).name or name
    return Card(message=f"Delete {name}", severity="destructive", resource_name=name)


BUILDERS: dict[str, Builder] = {
    "create-data-table": _create_table,
    "delete-data-table": _delete_table,
    "add-data-table-column": _add_column,
    "delete-data-table-column": _delete_column,
    "rename-data-table-column": _rename_column,
    "insert-data-table-rows": _insert_rows,
    "update-data-table-rows": _update_rows,
    "delete-data-table-rows": _delete_rows,
    "delete-workflow": _named_workflow_card("Archive", "archive-workflow"),
    "unarchive-workflow": _named_workflow_card("Restore", "restore-workflow"),
    "unpublish-workflow": _named_workflow_card("Unpublish", "unpublish-workflow"),
    "publish-workflow": _publish,
    "restore-workflow-version": _restore_version,
    "update-workflow-version": _update_version,
    "run-workflow": _run,
    "execute-node": _execute_node,
    "tag-workflow": _tag,
    "cleanup-test-executions": _cleanup,
    "create-folder": _create_folder,
    "delete-folder": _delete_folder,
    "move-workflow-to-folder": _move,
    "delete-credential": _delete_credential,
}
