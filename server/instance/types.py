"""The values the instance seam speaks in: what the tools and the pipeline read and write of
the user's instance, independent of where it lives (the embedded SQL store, or an n8n reached
over its public REST API). Ids are strings, as n8n's are; times are timezone-aware."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from server.errors import InvalidArgumentError, NotFoundError

__all__ = [
    "ACTIVITY_CATEGORIES",
    "SYSTEM_COLUMNS",
    "ActivityEntry",
    "ActivityExpansion",
    "Binding",
    "Column",
    "ColumnType",
    "Condition",
    "CredentialField",
    "CredentialInfo",
    "CredentialTypeSchema",
    "DataTable",
    "Execution",
    "Filter",
    "Folder",
    "ListStatus",
    "RowFilter",
    "Tag",
    "VersionInfo",
    "Workflow",
    "WorkflowContent",
    "WorkflowGoneError",
    "WorkflowSummary",
]

ListStatus = Literal["active", "archived", "all"]
ColumnType = Literal["string", "number", "boolean", "date"]
Condition = Literal["eq", "neq", "like", "gt", "gte", "lt", "lte", "isEmpty", "isNotEmpty"]
# Every data table has these, managed by the instance.
SYSTEM_COLUMNS = {"id": "number", "createdAt": "date", "updatedAt": "date"}


# -- workflows ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WorkflowContent:
    name: str
    nodes: list[Any]
    connections: dict[str, Any]
    settings: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Workflow:
    id: str
    name: str
    project_id: str | None
    is_archived: bool
    is_supporting: bool
    active_version_id: str | None
    current_version_id: str
    version_number: int
    created_at: datetime
    updated_at: datetime
    nodes: list[Any]
    connections: dict[str, Any]
    settings: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        """WorkflowJSON, as the SDK and n8n read it."""
        return {
            "id": self.id,
            "name": self.name,
            "nodes": self.nodes,
            "connections": self.connections,
            "settings": self.settings,
        }


@dataclass(frozen=True, kw_only=True)
class WorkflowSummary:
    """A workflow as a listing shows it (no nodes)."""

    id: str
    name: str
    project_id: str | None
    is_archived: bool
    active_version_id: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class Binding:
    """Which workflow a thread's source file builds, and the source last saved."""

    workflow_id: str
    source_hash: str
    version_id: str


@dataclass(frozen=True, kw_only=True)
class VersionInfo:
    id: str
    number: int
    label: str | None
    description: str | None
    created_at: datetime
    is_active: bool
    is_current_draft: bool


class WorkflowGoneError(NotFoundError):
    """A save targeted a workflow that was deleted or archived."""

    def __init__(self, workflow_id: str, *, archived: bool) -> None:
        state = "is archived" if archived else "does not exist"
        super().__init__(f"workflow {workflow_id!r} {state}")
        self.workflow_id = workflow_id
        self.archived = archived


# -- the activity log ---------------------------------------------------------------------

# What the log records changes of (n8n's activity categories).
ACTIVITY_CATEGORIES = ("workflow", "credential")


@dataclass(frozen=True, kw_only=True)
class ActivityEntry:
    """One change: what happened (`category` and `action`, e.g. workflow / published) to
    which resource, when, by whom (None: nobody's, the service's own work), in which project,
    with a small detail (node counts, the node types added or removed, a version's name, a
    credential's type)."""

    id: int
    at: datetime
    category: str
    action: str
    user_id: str | None
    project_id: str
    resource_type: str | None
    resource_id: str | None
    resource_name: str | None
    detail: dict[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class ActivityExpansion:
    """One entry, and what else the log knows of its resource (newest first)."""

    entry: ActivityEntry
    resource_history: list[ActivityEntry]


# -- executions --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Execution:
    id: str
    workflow_id: str
    version_id: str
    thread_id: str
    mode: str
    status: str
    is_verification: bool
    trigger_node: str | None
    started_at: datetime
    finished_at: datetime | None
    result: dict[str, Any]
    error: str | None
    # sandbox: a run of this service's (verification, run-workflow); instance: the instance's
    # own (e.g. a published workflow's webhook run in n8n).
    ran_in: Literal["sandbox", "instance"] = "sandbox"

    @property
    def nodes(self) -> dict[str, Any]:
        return dict(self.result.get("nodes") or {})

    @property
    def order(self) -> list[str]:
        return list(self.result.get("order") or [])


# -- credentials (metadata only: secrets are write-only) ---------------------------------


@dataclass(frozen=True, kw_only=True)
class CredentialInfo:
    id: str
    name: str
    type: str
    project_id: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class CredentialField:
    name: str
    type: str  # a JSON-schema type name: string, number, boolean, ...
    required: bool


@dataclass(frozen=True, kw_only=True)
class CredentialTypeSchema:
    """A credential type's fields as the instance describes them."""

    name: str
    fields: list[CredentialField]


# -- data tables -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Column:
    id: str
    name: str
    type: str


@dataclass(frozen=True, kw_only=True)
class DataTable:
    id: str
    project_id: str
    name: str
    columns: list[Column]
    created_at: datetime
    updated_at: datetime

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def column_by_id(self, column_id: str) -> Column:
        found = next((c for c in self.columns if c.id == column_id), None)
        if found is None:
            known = ", ".join(f"{c.id} ({c.name})" for c in self.columns) or "none"
            raise NotFoundError(
                f"data table {self.id!r} has no column {column_id!r}; its columns: {known}"
            )
        return found

    def type_of(self, name: str) -> str:
        if name in SYSTEM_COLUMNS:
            return SYSTEM_COLUMNS[name]
        column = self.column(name)
        if column is None:
            known = ", ".join([*SYSTEM_COLUMNS, *(c.name for c in self.columns)])
            raise InvalidArgumentError(f"unknown column {name!r}; the columns are: {known}")
        return column.type


@dataclass(frozen=True, kw_only=True)
class Filter:
    column: str
    condition: str
    value: Any = None


@dataclass(frozen=True, kw_only=True)
class RowFilter:
    """Conditions combined with `and` or `or`."""

    combine: Literal["and", "or"]
    filters: list[Filter]


# -- folders and tags --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Folder:
    id: str
    project_id: str
    name: str
    parent_folder_id: str | None


@dataclass(frozen=True, kw_only=True)
class Tag:
    id: str
    name: str
    usage_count: int
