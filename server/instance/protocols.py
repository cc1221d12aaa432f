"""The instance seam: what the tools and the pipeline do with the user's instance (its
workflows and their versions, executions, credentials, data tables, folders, tags and
projects), as protocols.

Two kinds of implementation are meant to sit behind it: the embedded SQL store
(`server/domain/`, the standalone default) and an n8n reached over its public REST API. So
the protocols promise only what both can keep:

- ids are opaque strings chosen by the instance;
- credential secrets are write-only (`Credentials` never returns them; only the embedded
  store, which runs workflows in the thread's sandbox itself, offers `CredentialSecrets`);
- licence-gated parts are asked of `Features` at run time, not read from configuration;
- any call may fail transiently: it then raises `InstanceUnavailableError` (UNAVAILABLE at
  the edge), and nothing was changed unless the error says so.

Callers' visibility (projects) is applied by the implementation where a method takes a
`Caller`, and by `server/tools/scope.py` elsewhere.

Some of what the pipeline needs is the service's own state, not the instance's: which
thread's source file builds which workflow (`Workflows.binding`, and the binding written by
`save_from_source`), the fixtures and simulation plan of each built version
(`verification_inputs`), and the runs this service makes in its sandboxes
(`Executions.start`/`finish`). The embedded store keeps them in the same tables; an n8n
implementation keeps them in the service's database beside its REST calls, and answers the
rest (workflows, versions through `history`, archive, publish, credentials, data tables,
tags, folders, projects) from n8n.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from server.core.caller import Caller
from server.errors import UnavailableError
from server.instance.types import (
    ActivityEntry,
    ActivityExpansion,
    Binding,
    Column,
    CredentialInfo,
    CredentialTypeSchema,
    DataTable,
    Execution,
    Folder,
    ListStatus,
    RowFilter,
    Tag,
    VersionInfo,
    Workflow,
    WorkflowContent,
    WorkflowSummary,
)

__all__ = [
    "FOLDERS_FEATURE",
    "Activity",
    "CredentialChecks",
    "CredentialSecrets",
    "CredentialTypes",
    "Credentials",
    "DataTables",
    "Executions",
    "Features",
    "Folders",
    "InstanceUnavailableError",
    "Projects",
    "Tags",
    "Workflows",
]


class InstanceUnavailableError(UnavailableError):
    """The instance could not be reached or answered with a transient failure; retry later."""


@runtime_checkable
class Workflows(Protocol):
    """Workflows, their numbered versions, publishing and archiving, and which thread's source
    file builds which workflow."""

    async def get(self, workflow_id: str, caller: Caller | None = None) -> Workflow | None:
        """None when it does not exist or `caller` cannot see its project."""
        ...

    async def require(self, workflow_id: str, caller: Caller | None = None) -> Workflow: ...

    async def listing(
        self,
        *,
        query: str | None = None,
        limit: int = 50,
        status: ListStatus = "active",
        caller: Caller | None = None,
    ) -> list[WorkflowSummary]: ...

    async def node_types(
        self, *, caller: Caller | None = None
    ) -> list[tuple[WorkflowSummary, frozenset[str]]]:
        """Every workflow that is not archived (that `caller` sees), with the node types its
        current draft uses: how the instance builds, in one read."""
        ...

    async def binding(self, thread_id: str, file_path: str) -> Binding | None: ...

    async def save_from_source(
        self,
        *,
        thread_id: str,
        file_path: str,
        source_hash: str,
        content: WorkflowContent,
        workflow_id: str | None,
        project_id: str | None = None,
        is_supporting: bool = False,
        fixtures: dict[str, Any] | None = None,
        simulation_plan: list[dict[str, Any]] | None = None,
    ) -> Workflow:
        """A new version of `workflow_id` (WorkflowGoneError when it is gone or archived), or
        a new workflow when None; the file is bound to it either way."""
        ...

    async def set_archived(self, workflow_id: str, archived: bool) -> Workflow: ...

    async def publish(self, workflow_id: str, version_id: str | None = None) -> str:
        """Activate a version (default: the current draft); returns the version id."""
        ...

    async def unpublish(self, workflow_id: str) -> None: ...

    async def versions(self, workflow_id: str, *, limit: int, skip: int) -> list[VersionInfo]: ...

    async def version(
        self, workflow_id: str, version_id: str
    ) -> tuple[VersionInfo, dict[str, Any]]: ...

    async def restore(self, workflow_id: str, version_id: str) -> str: ...

    async def label_version(
        self, workflow_id: str, version_id: str, *, label: str | None, description: str | None
    ) -> None: ...

    async def verification_inputs(
        self, version_id: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """A version's declared fixtures and its simulation plan (None: none could be made)."""
        ...

    async def version_json(
        self, version_id: str, workflow_id: str | None = None
    ) -> dict[str, Any]: ...

    async def replace_credentials(
        self,
        workflow_id: str,
        credentials: dict[str, dict[str, Any]],
        parameters: dict[str, dict[str, Any]] | None = None,
        simulation_plan: list[dict[str, Any]] | None = None,
    ) -> list[str]:
        """Set credentials (and parameter values) on named nodes as a new version that
        verifies with the current fixtures and `simulation_plan` (None: the current plan);
        returns the nodes changed."""
        ...

    async def version_count(self, workflow_id: str) -> int: ...


@runtime_checkable
class Executions(Protocol):
    async def start(
        self,
        *,
        workflow_id: str,
        version_id: str,
        thread_id: str,
        mode: str,
        trigger_node: str | None,
        is_verification: bool = False,
    ) -> Execution: ...

    async def finish(
        self, execution_id: str, *, status: str, result: dict[str, Any], error: str | None
    ) -> Execution: ...

    async def require(self, execution_id: str) -> Execution: ...

    async def listing(
        self, *, workflow_id: str | None = None, status: str | None = None, limit: int = 20
    ) -> list[Execution]: ...

    async def delete_test_runs(self, workflow_id: str, *, older_than: datetime) -> int: ...

    async def stop_in_instance(self, execution_id: str) -> tuple[bool, str]:
        """Stop one of the instance's own executions (`ran_in == "instance"`)."""
        ...


@runtime_checkable
class Credentials(Protocol):
    """Credential metadata; secret data goes in (create, update) and never comes out."""

    async def create(
        self, *, project_id: str, name: str, type_name: str, data: dict[str, Any]
    ) -> CredentialInfo: ...

    async def update(
        self, credential_id: str, *, data: dict[str, Any], name: str | None = None
    ) -> CredentialInfo: ...

    async def all(
        self, project_ids: list[str], type_name: str | None = None
    ) -> list[CredentialInfo]: ...

    async def get(self, credential_id: str) -> CredentialInfo: ...

    async def delete(self, credential_id: str) -> None: ...


@runtime_checkable
class CredentialSecrets(Protocol):
    """Secret data, for the service's own use (running a workflow or a credential test in the
    sandbox); never a result or an event. Only an instance whose runs happen here has it."""

    async def reveal(self, credential_id: str) -> dict[str, Any]: ...


@runtime_checkable
class CredentialChecks(Protocol):
    """The instance's own test of a credential (an instance that keeps secrets to itself, so
    the service cannot test them)."""

    async def test(self, credential_id: str) -> tuple[bool, str]:
        """(whether it works, what the instance said)."""
        ...


@runtime_checkable
class CredentialTypes(Protocol):
    """Credential types as the instance itself knows them: an n8n instance's community or
    custom nodes bring types the node catalog lacks."""

    async def schema(self, type_name: str) -> CredentialTypeSchema | None:
        """The type's fields; None when the instance has no such type."""
        ...


@runtime_checkable
class DataTables(Protocol):
    async def all(self, project_ids: list[str] | None = None) -> list[DataTable]: ...

    async def get(self, table_id: str) -> DataTable: ...

    async def create(
        self, name: str, columns: list[tuple[str, str]], *, project_id: str = ...
    ) -> DataTable: ...

    async def delete(self, table_id: str) -> None: ...

    async def add_column(self, table_id: str, name: str, kind: str) -> Column: ...

    async def rename_column(self, table_id: str, column_id: str, new_name: str) -> None: ...

    async def delete_column(self, table_id: str, column_id: str) -> None: ...

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
        ...

    async def insert(self, table_id: str, values: list[dict[str, Any]]) -> list[int]: ...

    async def update(self, table_id: str, row_filter: RowFilter, data: dict[str, Any]) -> int: ...

    async def delete_rows(self, table_id: str, row_filter: RowFilter) -> int: ...


@runtime_checkable
class Folders(Protocol):
    """Folders of workflows within a project. A folder is looked up within its project (n8n
    addresses it by both)."""

    async def in_project(self, project_id: str) -> list[Folder]: ...

    async def get(self, project_id: str, folder_id: str) -> Folder:
        """NotFoundError unless the folder is in that project."""
        ...

    async def create(self, project_id: str, name: str, parent_folder_id: str | None) -> Folder: ...

    async def delete(self, project_id: str, folder_id: str, transfer_to: str | None) -> int:
        """Returns how many workflows were moved or archived."""
        ...

    async def move_workflow(self, workflow_id: str, folder_id: str | None) -> None: ...


@runtime_checkable
class Tags(Protocol):
    async def all(self) -> list[Tag]: ...

    async def set_workflow_tags(self, workflow_id: str, names: list[str]) -> list[str]: ...


@runtime_checkable
class Projects(Protocol):
    async def visible(self, caller: Caller) -> list[str]:
        """The ids of the projects `caller` may see, in a stable order."""
        ...


@runtime_checkable
class Activity(Protocol):
    """The instance's activity log: the changes made to its workflows and credentials, newest
    first, each in the project of what it changed. Only the projects asked about are read."""

    async def feed(
        self,
        *,
        project_ids: list[str],
        limit: int,
        category: str | None = None,
        resource_id: str | None = None,
        before_id: int | None = None,
    ) -> list[ActivityEntry]:
        """Up to `limit` entries, newest first: of one category, of one resource, or only
        older than `before_id` (paging back)."""
        ...

    async def expand(
        self, entry_id: int, *, project_ids: list[str], history: int
    ) -> ActivityExpansion | None:
        """The entry and up to `history` other entries of its resource; None when there is
        no such entry in those projects."""
        ...


# The feature of folders: the embedded store always has them; n8n's need a licence.
FOLDERS_FEATURE = "folders"


@runtime_checkable
class Features(Protocol):
    """Licence-gated features, as the instance reports them now (an n8n instance's licence
    can change while the service runs)."""

    def enabled(self, feature: str) -> bool: ...
