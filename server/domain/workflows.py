"""The workflow store: workflows with numbered versions, archive state and timestamps. A save
also binds the thread's source file to the workflow (`server/records/source_bindings.py`: the
service's own record, kept the same whatever instance holds the workflow).

A save is one transaction: the new version, the workflow's pointers and the file's binding land
together or not at all.
"""

from __future__ import annotations

import secrets
import string
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from server.core.caller import DEFAULT_PROJECT, Caller
from server.core.ids import new_id
from server.domain import activity
from server.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from server.instance.rules import set_path
from server.instance.types import (
    Binding,
    ListStatus,
    VersionInfo,
    Workflow,
    WorkflowContent,
    WorkflowGoneError,
    WorkflowSummary,
)
from server.records.source_bindings import bind_source, source_binding
from server.store import Database
from server.store.models import WorkflowRow, WorkflowVersionRow

__all__ = [
    "VERSIONS",
    "WORKFLOWS",
    "WorkflowStore",
    "new_workflow_id",
]

_ALPHANUMERIC = string.ascii_letters + string.digits
WORKFLOWS = WorkflowRow.metadata.tables["workflows"]
VERSIONS = WorkflowRow.metadata.tables["workflow_versions"]


def new_workflow_id() -> str:
    """n8n's shape: 16 letters and digits."""
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(16))


class WorkflowStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, workflow_id: str, caller: Caller | None = None) -> Workflow | None:
        """The workflow, or None if it does not exist or `caller` cannot see its project."""
        async with self.db.session() as session:
            workflow = await _load(session, workflow_id)
        if workflow is None or (caller is not None and not caller.sees(workflow.project_id)):
            return None
        return workflow

    async def require(self, workflow_id: str, caller: Caller | None = None) -> Workflow:
        workflow = await self.get(workflow_id, caller)
        if workflow is None:
            raise NotFoundError(f"workflow {workflow_id!r} does not exist")
        return workflow

    async def listing(
        self,
        *,
        query: str | None = None,
        limit: int = 50,
        status: ListStatus = "active",
        caller: Caller | None = None,
    ) -> list[WorkflowSummary]:
        statement = select(WorkflowRow).order_by(WorkflowRow.updated_at.desc()).limit(limit)
        if caller is not None:
            project = func.coalesce(WorkflowRow.project_id, DEFAULT_PROJECT)
            statement = statement.where(project.in_(sorted(caller.project_ids)))
        if status != "all":
            statement = statement.where(WorkflowRow.is_archived.is_(status == "archived"))
        if query:
            statement = statement.where(func.lower(WorkflowRow.name).contains(query.lower()))
        async with self.db.session() as session:
            rows = (await session.scalars(statement)).all()
        return [_summary(row) for row in rows]

    async def node_types(
        self, *, caller: Caller | None = None
    ) -> list[tuple[WorkflowSummary, frozenset[str]]]:
        statement = (
            select(WorkflowRow, WorkflowVersionRow.nodes)
            .join(WorkflowVersionRow, WorkflowVersionRow.id == WorkflowRow.current_version_id)
            .where(WorkflowRow.is_archived.is_(False))
        )
        if caller is not None:
            project = func.coalesce(WorkflowRow.project_id, DEFAULT_PROJECT)
            statement = statement.where(project.in_(sorted(caller.project_ids)))
        async with self.db.session() as session:
            found = (await session.execute(statement)).all()
        return [
            (
                _summary(row),
                frozenset(
                    str(n["type"]) for n in nodes or [] if isinstance(n, dict) and n.get("type")
                ),
            )
            for row, nodes in found
        ]

    async def binding(self, thread_id: str, file_path: str) -> Binding | None:
        return await source_binding(self.db, thread_id, file_path)

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
        """Save a build: a new version of `workflow_id` (WorkflowGoneError if it does not exist
        or is archived), or a new workflow when it is None; the file is bound to it either
        way, and the activity log told. One transaction of Core statements (the ORM costs ~1 ms
        a statement)."""
        now = datetime.now(UTC)
        version_id = new_id("ver")
        async with self.db.engine.begin() as conn:
            if workflow_id is None:
                workflow_id = new_workflow_id()
                row: dict[str, Any] = {
                    "id": workflow_id,
                    "name": content.name,
                    "project_id": project_id,
                    "is_archived": False,
                    "is_supporting": is_supporting,
                    "current_version_id": version_id,
                    "active_version_id": None,
                    "created_at": now,
                    "updated_at": now,
                }
                await conn.execute(insert(WORKFLOWS).values(**row))
            else:
                # Taking the row (and its lock) first serialises concurrent saves of it.
                updated = await conn.execute(
                    update(WORKFLOWS)
                    .where(WORKFLOWS.c.id == workflow_id, WORKFLOWS.c.is_archived.is_(False))
                    .values(
                        name=content.name,
                        is_supporting=WORKFLOWS.c.is_supporting | is_supporting,
                        current_version_id=version_id,
                        updated_at=now,
                    )
                    .returning(*WORKFLOWS.c)
                )
                found = updated.mappings().first()
                if found is None:
                    archived = await conn.scalar(
                        select(WORKFLOWS.c.is_archived).where(WORKFLOWS.c.id == workflow_id)
                    )
                    raise WorkflowGoneError(workflow_id, archived=archived is not None)
                row = dict(found)
            number = await _add_version(
                conn,
                workflow_id=workflow_id,
                version_id=version_id,
                content=content,
                source_hash=source_hash,
                fixtures=fixtures,
                simulation_plan=simulation_plan,
                now=now,
            )
            await bind_source(
                conn,
                thread_id=thread_id,
                file_path=file_path,
                binding=Binding(
                    workflow_id=workflow_id, source_hash=source_hash, version_id=version_id
                ),
            )
            previous = None if number == 1 else await _nodes_of(conn, workflow_id, number - 1)
            await activity.record(
                conn,
                category="workflow",
                action="created" if number == 1 else "saved",
                project_id=row["project_id"],
                resource_type="workflow",
                resource_id=workflow_id,
                resource_name=content.name,
                data=activity.saved_detail(content.nodes, previous),
            )
        return Workflow(
            id=workflow_id,
            name=content.name,
            project_id=row["project_id"],
            is_archived=False,
            is_supporting=row["is_supporting"],
            active_version_id=row["active_version_id"],
            current_version_id=version_id,
            version_number=number,
            created_at=row["created_at"],
            updated_at=now,
            nodes=content.nodes,
            connections=content.connections,
            settings=content.settings,
        )

    async def set_archived(self, workflow_id: str, archived: bool) -> Workflow:
        async with self.db.session() as session, session.begin():
            row = await session.get(WorkflowRow, workflow_id)
            if row is None:
                raise NotFoundError(f"workflow {workflow_id!r} does not exist")
            changed = row.is_archived != archived
            row.is_archived = archived
            if archived:
                row.active_version_id = None  # archiving unpublishes
            row.updated_at = datetime.now(UTC)
            if changed:
                await _record(session, row, "archived" if archived else "unarchived")
        return await self.require(workflow_id)

    async def publish(self, workflow_id: str, version_id: str | None = None) -> str:
        """Make a version (default: the current draft) the active one."""
        async with self.db.session() as session, session.begin():
            row = await _live_row(session, workflow_id)
            chosen = version_id or row.current_version_id
            version = await _version_of(session, workflow_id, chosen)
            row.active_version_id = chosen
            row.updated_at = datetime.now(UTC)
            named = {"versionName": activity.clip(version.label)} if version.label else {}
            await _record(session, row, "published", named)
        return chosen

    async def unpublish(self, workflow_id: str) -> None:
        async with self.db.session() as session, session.begin():
            row = await session.get(WorkflowRow, workflow_id)
            if row is None:
                raise NotFoundError(f"workflow {workflow_id!r} does not exist")
            was_published = row.active_version_id is not None
            row.active_version_id = None
            row.updated_at = datetime.now(UTC)
            if was_published:
                await _record(session, row, "unpublished")

    async def versions(self, workflow_id: str, *, limit: int, skip: int) -> list[VersionInfo]:
        """Newest first, metadata only."""
        workflow = await self.require(workflow_id)
        async with self.db.session() as session:
            rows = await session.scalars(
                select(WorkflowVersionRow)
                .where(WorkflowVersionRow.workflow_id == workflow_id)
                .order_by(WorkflowVersionRow.number.desc())
                .limit(limit)
                .offset(skip)
            )
            return [_version_info(v, workflow) for v in rows]

    async def version(
        self, workflow_id: str, version_id: str
    ) -> tuple[VersionInfo, dict[str, Any]]:
        """One version's metadata and its content as WorkflowJSON."""
        workflow = await self.require(workflow_id)
        async with self.db.session() as session:
            version = await _version_of(session, workflow_id, version_id)
            return _version_info(version, workflow), {
                "id": workflow_id,
                "name": version.name,
                "nodes": list(version.nodes),
                "connections": dict(version.connections),
                "settings": dict(version.settings),
            }

    async def restore(self, workflow_id: str, version_id: str) -> str:
        """Make an earlier version's content the current draft again, as a new version (the
        history stays whole). Returns the new version's id."""
        now = datetime.now(UTC)
        new_version = new_id("ver")
        async with self.db.session() as session, session.begin():
            row = await _live_row(session, workflow_id)
            old = await _version_of(session, workflow_id, version_id)
            draft = await session.get(WorkflowVersionRow, row.current_version_id)
            conn = await session.connection()
            await _add_version(
                conn,
                workflow_id=workflow_id,
                version_id=new_version,
                content=WorkflowContent(
                    name=old.name,
                    nodes=list(old.nodes),
                    connections=dict(old.connections),
                    settings=dict(old.settings),
                ),
                source_hash=old.source_hash,
                fixtures=old.fixtures,
                simulation_plan=old.simulation_plan,
                now=now,
            )
            row.current_version_id = new_version
            row.name = old.name
            row.updated_at = now
            detail = activity.saved_detail(list(old.nodes), list(draft.nodes) if draft else None)
            await _record(session, row, "saved", detail | {"restoredVersionId": version_id})
        return new_version

    async def label_version(
        self, workflow_id: str, version_id: str, *, label: str | None, description: str | None
    ) -> None:
        async with self.db.session() as session, session.begin():
            version = await _version_of(session, workflow_id, version_id)
            version.label = label
            version.description = description
            row = await session.get(WorkflowRow, workflow_id)
            if row is not None:
                named = {"versionName": activity.clip(label)} if label else {}
                await _record(session, row, "version-updated", {"versionId": version_id} | named)

    async def verification_inputs(
        self, version_id: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """The fixtures a version's source declared and its simulation plan (None when the
        plan could not be made)."""
        async with self.db.session() as session:
            version = await session.get(WorkflowVersionRow, version_id)
        if version is None:
            raise NotFoundError(f"workflow version {version_id!r} does not exist")
        return dict(version.fixtures or {}), version.simulation_plan

    async def version_json(self, version_id: str, workflow_id: str | None = None) -> dict[str, Any]:
        """One saved version as WorkflowJSON (what an execution of it ran); version ids are
        unique here, so `workflow_id` is not needed."""
        async with self.db.session() as session:
            version = await session.get(WorkflowVersionRow, version_id)
        if version is None:
            raise NotFoundError(f"workflow version {version_id!r} does not exist")
        return {
            "id": version.workflow_id,
            "name": version.name,
            "nodes": list(version.nodes),
            "connections": dict(version.connections),
            "settings": dict(version.settings),
        }

    async def replace_credentials(
        self,
        workflow_id: str,
        credentials: dict[str, dict[str, Any]],
        parameters: dict[str, dict[str, Any]] | None = None,
        simulation_plan: list[dict[str, Any]] | None = None,
    ) -> list[str]:
        """Set credentials (and parameter values, by dotted path) on named nodes, all or none,
        as a new version (fixtures carried over; the plan too, unless a new one is given).
        Unknown node names are refused before anything changes. Returns the nodes changed."""
        parameters = parameters or {}
        now = datetime.now(UTC)
        version_id = new_id("ver")
        async with self.db.engine.begin() as conn:
            row = (
                await conn.execute(
                    select(
                        WORKFLOWS.c.current_version_id,
                        WORKFLOWS.c.is_archived,
                        WORKFLOWS.c.project_id,
                    )
                    .where(WORKFLOWS.c.id == workflow_id)
                    .with_for_update()
                )
            ).first()
            if row is None or row.is_archived:
                raise WorkflowGoneError(workflow_id, archived=row is not None)
            current = (
                (
                    await conn.execute(
                        select(VERSIONS).where(VERSIONS.c.id == row.current_version_id)
                    )
                )
                .mappings()
                .one()
            )
            nodes = [dict(n) for n in current["nodes"]]
            names = {str(n.get("name")) for n in nodes}
            unknown = sorted((set(credentials) | set(parameters)) - names)
            if unknown:
                raise InvalidArgumentError(
                    f"workflow {workflow_id} has no node named {', '.join(unknown)}; "
                    f"its nodes: {', '.join(sorted(names))}"
                )
            for node in nodes:
                if node.get("name") in credentials:
                    node["credentials"] = {
                        **(node.get("credentials") or {}),
                        **credentials[str(node["name"])],
                    }
                for path, value in parameters.get(str(node.get("name")), {}).items():
                    node["parameters"] = set_path(dict(node.get("parameters") or {}), path, value)
            await _add_version(
                conn,
                workflow_id=workflow_id,
                version_id=version_id,
                content=WorkflowContent(
                    name=current["name"],
                    nodes=nodes,
                    connections=current["connections"],
                    settings=current["settings"],
                ),
                source_hash=current["source_hash"],
                fixtures=current["fixtures"],
                simulation_plan=current["simulation_plan"]
                if simulation_plan is None
                else simulation_plan,
                now=now,
            )
            await conn.execute(
                update(WORKFLOWS)
                .where(WORKFLOWS.c.id == workflow_id)
                .values(current_version_id=version_id, updated_at=now)
            )
            await activity.record(
                conn,
                category="workflow",
                action="saved",
                project_id=row.project_id,
                resource_type="workflow",
                resource_id=workflow_id,
                resource_name=current["name"],
                data=activity.saved_detail(nodes, list(current["nodes"])),
            )
        changed = set(credentials) | set(parameters)
        return [str(n["name"]) for n in nodes if n.get("name") in changed]

    async def version_count(self, workflow_id: str) -> int:
        async with self.db.session() as session:
            count = await session.scalar(
                select(func.count()).where(WorkflowVersionRow.workflow_id == workflow_id)
            )
            return int(count or 0)


async def _add_version(
    conn: AsyncConnection,
    *,
    workflow_id: str,
    version_id: str,
    content: WorkflowContent,
    source_hash: str | None,
    fixtures: dict[str, Any] | None,
    simulation_plan: list[dict[str, Any]] | None,
    now: datetime,
) -> int:
    """Insert the next version of a workflow (numbered max + 1 in the same statement; the
    unique index refuses a duplicate) and return its number."""
    next_number = (
        select(func.coalesce(func.max(VERSIONS.c.number), 0) + 1)
        .where(VERSIONS.c.workflow_id == workflow_id)
        .scalar_subquery()
    )
    number = await conn.scalar(
        insert(VERSIONS)
        .values(
            id=version_id,
            workflow_id=workflow_id,
            number=next_number,
            name=content.name,
            nodes=content.nodes,
            connections=content.connections,
            settings=content.settings,
            source_hash=source_hash,
            created_at=now,
            fixtures=fixtures,
            simulation_plan=simulation_plan,
        )
        .returning(VERSIONS.c.number)
    )
    return int(number or 1)


async def _nodes_of(conn: AsyncConnection, workflow_id: str, number: int) -> list[Any] | None:
    """The nodes of a workflow's version `number` (None: there is none)."""
    nodes = await conn.scalar(
        select(VERSIONS.c.nodes).where(
            VERSIONS.c.workflow_id == workflow_id, VERSIONS.c.number == number
        )
    )
    return list(nodes) if nodes is not None else None


async def _record(
    session: AsyncSession, row: WorkflowRow, action: str, data: dict[str, Any] | None = None
) -> None:
    """A workflow's entry in the activity log, in the session's transaction."""
    await activity.record(
        await session.connection(),
        category="workflow",
        action=action,
        project_id=row.project_id,
        resource_type="workflow",
        resource_id=row.id,
        resource_name=row.name,
        data=data,
    )


async def _live_row(session: AsyncSession, workflow_id: str) -> WorkflowRow:
    """The workflow's row, if it exists and is not archived."""
    row = await session.get(WorkflowRow, workflow_id)
    if row is None:
        raise NotFoundError(f"workflow {workflow_id!r} does not exist")
    if row.is_archived:
        raise FailedPreconditionError(
            f"workflow {workflow_id!r} is archived; restore it with unarchive-workflow first"
        )
    return row


async def _version_of(
    session: AsyncSession, workflow_id: str, version_id: str
) -> WorkflowVersionRow:
    version = await session.get(WorkflowVersionRow, version_id)
    if version is None or version.workflow_id != workflow_id:
        raise NotFoundError(
            f"workflow {workflow_id!r} has no version {version_id!r}; "
            "list-workflow-versions names them"
        )
    return version


def _version_info(version: WorkflowVersionRow, workflow: Workflow) -> VersionInfo:
    return VersionInfo(
        id=version.id,
        number=version.number,
        label=version.label,
        description=version.description,
        created_at=version.created_at,
        is_active=version.id == workflow.active_version_id,
        is_current_draft=version.id == workflow.current_version_id,
    )


async def _load(session: AsyncSession, workflow_id: str) -> Workflow | None:
    """The workflow with its current version, in one statement (every build and
    verification reads one)."""
    found = (
        await session.execute(
            select(WorkflowRow, WorkflowVersionRow)
            .outerjoin(WorkflowVersionRow, WorkflowVersionRow.id == WorkflowRow.current_version_id)
            .where(WorkflowRow.id == workflow_id)
        )
    ).first()
    if found is None:
        return None
    row, version = found
    if version is None:  # written in one transaction with the row: cannot happen
        raise NotFoundError(f"workflow {workflow_id!r} has no saved version")
    return _compose(row, version)


def _compose(row: WorkflowRow, version: WorkflowVersionRow) -> Workflow:
    return Workflow(
        id=row.id,
        name=row.name,
        project_id=row.project_id,
        is_archived=row.is_archived,
        is_supporting=row.is_supporting,
        active_version_id=row.active_version_id,
        current_version_id=version.id,
        version_number=version.number,
        created_at=row.created_at,
        updated_at=row.updated_at,
        nodes=list(version.nodes),
        connections=dict(version.connections),
        settings=dict(version.settings),
    )


def _summary(row: WorkflowRow) -> WorkflowSummary:
    return WorkflowSummary(
        id=row.id,
        name=row.name,
        project_id=row.project_id,
        is_archived=row.is_archived,
        active_version_id=row.active_version_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
