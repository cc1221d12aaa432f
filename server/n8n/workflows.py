"""Workflows kept in n8n: content, versions (n8n's history), archive and publishing through
its public API; what n8n has no place for stays in the service's database (which thread's
source file builds which workflow, and each version's fixtures, simulation plan and label).

Visibility is n8n's: the key a call carries (the service's, or the user's own) decides what
exists, so objects carry the project `INSTANCE_SCOPED`, which every caller sees.
"""

from __future__ import annotations

import contextlib
import copy
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite

from server.core.caller import INSTANCE_SCOPED, Caller
from server.errors import FailedPreconditionError, InstanceAIError, NotFoundError
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
from server.n8n.client import N8nClient
from server.records.source_bindings import bind_source, source_binding
from server.store import Database
from server.store.models import VersionNoteRow

__all__ = ["N8nWorkflows", "parse_time"]

NOTES = VersionNoteRow.metadata.tables["version_notes"]


class N8nWorkflows:
    def __init__(self, client: N8nClient, db: Database) -> None:
        self.client = client
        self.db = db

    async def get(self, workflow_id: str, caller: Caller | None = None) -> Workflow | None:
        try:
            return await self.require(workflow_id, caller)
        except NotFoundError:
            return None

    async def require(self, workflow_id: str, caller: Caller | None = None) -> Workflow:
        try:
            found = await self.client.get(f"/workflows/{workflow_id}")
        except NotFoundError:
            raise NotFoundError(f"workflow {workflow_id!r} does not exist") from None
        return await self._compose(found)

    async def listing(
        self,
        *,
        query: str | None = None,
        limit: int = 50,
        status: ListStatus = "active",
        caller: Caller | None = None,
    ) -> list[WorkflowSummary]:
        # n8n's `name` filter is exact; the tools' query is a case-insensitive substring.
        found = await self.client.pages("/workflows", excludePinnedData=True)
        wanted = [
            w
            for w in found
            if (status == "all" or bool(w.get("isArchived")) == (status == "archived"))
            and (not query or query.lower() in str(w.get("name", "")).lower())
        ]
        wanted.sort(key=lambda w: str(w.get("updatedAt")), reverse=True)
        return [_summary(w) for w in wanted[:limit]]

    async def node_types(
        self, *, caller: Caller | None = None
    ) -> list[tuple[WorkflowSummary, frozenset[str]]]:
        # n8n's listing carries each workflow's nodes: one paged read, whatever the count.
        found = await self.client.pages("/workflows", excludePinnedData=True)
        return [
            (
                _summary(w),
                frozenset(
                    str(n["type"])
                    for n in w.get("nodes") or []
                    if isinstance(n, dict) and n.get("type")
                ),
            )
            for w in found
            if not w.get("isArchived")
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
        """Create the workflow in n8n, or save a new version of it (WorkflowGoneError when n8n
        no longer has it, or has it archived); then the service's own records of the build."""
        body = _body(content)
        if workflow_id is None:
            saved = await self.client.post("/workflows", body)
        else:
            current = await self.get(workflow_id)
            if current is None or current.is_archived:
                raise WorkflowGoneError(workflow_id, archived=current is not None)
            saved = await self.client.put(f"/workflows/{workflow_id}", body)
        version_id = str(saved["versionId"])
        try:
            async with self.db.engine.begin() as conn:
                await _add_note(
                    conn,
                    version_id=version_id,
                    workflow_id=str(saved["id"]),
                    values={
                        "fixtures": fixtures,
                        "simulation_plan": simulation_plan,
                        "is_supporting": is_supporting,
                    },
                )
                await bind_source(
                    conn,
                    thread_id=thread_id,
                    file_path=file_path,
                    binding=Binding(
                        workflow_id=str(saved["id"]),
                        source_hash=source_hash,
                        version_id=version_id,
                    ),
                )
        except Exception:
            if workflow_id is None:
                # Unbound, the new workflow would be made again by the next build: take it
                # back out of n8n (an update is a version in n8n's history, bound or not).
                await self._take_back(str(saved["id"]))
            raise
        return await self._compose(saved)

    async def _take_back(self, workflow_id: str) -> None:
        with contextlib.suppress(InstanceAIError):
            await self.client.post(f"/workflows/{workflow_id}/archive")
            await self.client.delete(f"/workflows/{workflow_id}")

    async def set_archived(self, workflow_id: str, archived: bool) -> Workflow:
        await self.require(workflow_id)
        action = "archive" if archived else "unarchive"
        await self.client.post(f"/workflows/{workflow_id}/{action}")
        return await self.require(workflow_id)

    async def publish(self, workflow_id: str, version_id: str | None = None) -> str:
        workflow = await self._live(workflow_id)
        chosen = version_id or workflow.current_version_id
        published = await self.client.post(
            f"/workflows/{workflow_id}/publish", {"versionId": chosen}
        )
        return str(published.get("activeVersionId") or chosen)

    async def unpublish(self, workflow_id: str) -> None:
        await self.require(workflow_id)
        await self.client.post(f"/workflows/{workflow_id}/unpublish")

    async def versions(self, workflow_id: str, *, limit: int, skip: int) -> list[VersionInfo]:
        """Newest first."""
        workflow = await self.require(workflow_id)
        history = await self._history(workflow_id)
        notes = await self._notes([str(h["versionId"]) for h in history])
        numbered = [
            _version_info(entry, len(history) - index, workflow, notes.get(entry["versionId"]))
            for index, entry in enumerate(history)
        ]
        return numbered[skip : skip + limit]

    async def version(
        self, workflow_id: str, version_id: str
    ) -> tuple[VersionInfo, dict[str, Any]]:
        infos = await self.versions(workflow_id, limit=10_000, skip=0)
        info = next((v for v in infos if v.id == version_id), None)
        if info is None:
            raise NotFoundError(
                f"workflow {workflow_id!r} has no version {version_id!r}; "
                "list-workflow-versions names them"
            )
        return info, await self.version_json(version_id, workflow_id)

    async def restore(self, workflow_id: str, version_id: str) -> str:
        _info, content = await self.version(workflow_id, version_id)
        workflow = await self._live(workflow_id)
        return await self._resave(
            workflow,
            nodes=content["nodes"],
            connections=content["connections"],
            inputs_from=version_id,
        )

    async def move_to_folder(self, workflow_id: str, folder_id: str | None) -> None:
        """Into a folder of its project (None: the project's root)."""
        await self._resave(await self._live(workflow_id), parentFolderId=folder_id)

    async def label_version(
        self, workflow_id: str, version_id: str, *, label: str | None, description: str | None
    ) -> None:
        await self.version(workflow_id, version_id)
        async with self.db.engine.begin() as conn:
            await _add_note(conn, version_id=version_id, workflow_id=workflow_id, values={})
            await conn.execute(
                update(NOTES)
                .where(NOTES.c.version_id == version_id)
                .values(label=label, description=description)
            )

    async def verification_inputs(
        self, version_id: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        note = (await self._notes([version_id])).get(version_id)
        if note is None:
            return {}, None
        return dict(note.fixtures or {}), note.simulation_plan

    async def version_json(self, version_id: str, workflow_id: str | None = None) -> dict[str, Any]:
        if workflow_id is None:
            note = (await self._notes([version_id])).get(version_id)
            if note is None:
                raise NotFoundError(f"there is no workflow version {version_id!r}")
            workflow_id = note.workflow_id
        try:
            found = await self.client.get(f"/workflows/{workflow_id}/versions/{version_id}")
        except NotFoundError:
            raise NotFoundError(f"there is no workflow version {version_id!r}") from None
        workflow = await self.require(workflow_id)
        return {
            "id": workflow_id,
            "name": workflow.name,
            "nodes": found.get("nodes") or [],
            "connections": found.get("connections") or {},
            "settings": workflow.settings,
        }

    async def replace_credentials(
        self,
        workflow_id: str,
        credentials: dict[str, dict[str, Any]],
        parameters: dict[str, dict[str, Any]] | None = None,
        simulation_plan: list[dict[str, Any]] | None = None,
    ) -> list[str]:
        workflow = await self._live(workflow_id)
        nodes = copy.deepcopy(workflow.nodes)
        by_name = {node.get("name"): node for node in nodes}
        wanted = set(credentials) | set(parameters or {})
        missing = sorted(name for name in wanted if name not in by_name)
        if missing:
            raise NotFoundError(f"workflow {workflow_id!r} has no node named {missing}")
        for name, refs in credentials.items():
            by_name[name]["credentials"] = {**(by_name[name].get("credentials") or {}), **refs}
        for name, values in (parameters or {}).items():
            node_parameters = by_name[name].setdefault("parameters", {})
            for path, value in values.items():
                set_path(node_parameters, path, value)
        await self._resave(workflow, nodes=nodes, simulation_plan=simulation_plan)
        return sorted(wanted)

    async def version_count(self, workflow_id: str) -> int:
        return len(await self._history(workflow_id))

    # -- helpers -------------------------------------------------------------------------

    async def _history(self, workflow_id: str) -> list[dict[str, Any]]:
        history = await self.client.pages(f"/workflows/{workflow_id}/history")
        history.sort(key=lambda h: str(h.get("createdAt")), reverse=True)
        return history

    async def _live(self, workflow_id: str) -> Workflow:
        """The workflow, if it exists and is not archived."""
        workflow = await self.require(workflow_id)
        if workflow.is_archived:
            raise FailedPreconditionError(
                f"workflow {workflow_id!r} is archived; restore it with unarchive-workflow first"
            )
        return workflow

    async def _resave(
        self,
        workflow: Workflow,
        *,
        nodes: list[dict[str, Any]] | None = None,
        connections: dict[str, Any] | None = None,
        inputs_from: str | None = None,
        simulation_plan: list[dict[str, Any]] | None = None,
        **more: Any,
    ) -> str:
        """Save the workflow again, changed (`nodes`, `connections`, `more` of n8n's update
        fields); the new version verifies with the fixtures and simulation plan of
        `inputs_from` (default: the current version; `simulation_plan` replaces its plan).
        Returns the new version's id."""
        content = WorkflowContent(
            name=workflow.name,
            nodes=workflow.nodes if nodes is None else nodes,
            connections=workflow.connections if connections is None else connections,
            settings=workflow.settings,
        )
        saved = await self.client.put(f"/workflows/{workflow.id}", _body(content) | more)
        source, target = inputs_from or workflow.current_version_id, str(saved["versionId"])
        if target != source:  # n8n keeps the version when only the folder changed
            await self._carry_inputs(workflow.id, source, target, simulation_plan)
        return target

    async def _carry_inputs(
        self,
        workflow_id: str,
        source: str,
        target: str,
        simulation_plan: list[dict[str, Any]] | None = None,
    ) -> None:
        """A version made from another (restored, credentials replaced) verifies with the same
        fixtures and simulation plan."""
        earlier = (await self._notes([source])).get(source)
        async with self.db.engine.begin() as conn:
            await _add_note(
                conn,
                version_id=target,
                workflow_id=workflow_id,
                values={
                    "fixtures": earlier.fixtures if earlier else None,
                    "simulation_plan": simulation_plan
                    if simulation_plan is not None
                    else (earlier.simulation_plan if earlier else None),
                },
            )

    async def _notes(self, version_ids: list[str]) -> dict[str, VersionNoteRow]:
        if not version_ids:
            return {}
        async with self.db.session() as session:
            rows = await session.scalars(
                select(VersionNoteRow).where(VersionNoteRow.version_id.in_(version_ids))
            )
            return {row.version_id: row for row in rows}

    async def _compose(self, found: dict[str, Any]) -> Workflow:
        workflow_id = str(found["id"])
        version_id = str(found["versionId"])
        async with self.db.session() as session:
            supporting = await session.scalar(
                select(VersionNoteRow.version_id)
                .where(VersionNoteRow.workflow_id == workflow_id, VersionNoteRow.is_supporting)
                .limit(1)
            )
        return Workflow(
            id=workflow_id,
            name=str(found.get("name") or ""),
            project_id=INSTANCE_SCOPED,
            is_archived=bool(found.get("isArchived")),
            is_supporting=supporting is not None,
            active_version_id=found.get("activeVersionId"),
            current_version_id=version_id,
            version_number=int(found.get("versionCounter") or 1),
            created_at=parse_time(found.get("createdAt")),
            updated_at=parse_time(found.get("updatedAt")),
            nodes=list(found.get("nodes") or []),
            connections=dict(found.get("connections") or {}),
            settings=dict(found.get("settings") or {}),
        )


def _body(content: WorkflowContent) -> dict[str, Any]:
    """What n8n's create and update accept (it refuses unknown settings keys)."""
    return {
        "name": content.name,
        "nodes": content.nodes,
        "connections": content.connections,
        "settings": content.settings or {"executionOrder": "v1"},
    }


async def _add_note(
    conn: Any, *, version_id: str, workflow_id: str, values: dict[str, Any]
) -> None:
    """Record a version's notes (a version already noted keeps what it has)."""
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(NOTES)
    await conn.execute(
        insert.values(
            version_id=version_id,
            workflow_id=workflow_id,
            created_at=datetime.now(UTC),
            **{"is_supporting": False, **values},
        ).on_conflict_do_nothing(index_elements=[NOTES.c.version_id])
    )


def _summary(found: dict[str, Any]) -> WorkflowSummary:
    return WorkflowSummary(
        id=str(found["id"]),
        name=str(found.get("name") or ""),
        project_id=INSTANCE_SCOPED,
        is_archived=bool(found.get("isArchived")),
        active_version_id=found.get("activeVersionId"),
        created_at=parse_time(found.get("createdAt")),
        updated_at=parse_time(found.get("updatedAt")),
    )


def _version_info(
    entry: dict[str, Any], number: int, workflow: Workflow, note: VersionNoteRow | None
) -> VersionInfo:
    version_id = str(entry["versionId"])
    return VersionInfo(
        id=version_id,
        number=number,
        label=(note.label if note else None) or entry.get("name"),
        description=(note.description if note else None) or entry.get("description"),
        created_at=parse_time(entry.get("createdAt")),
        is_active=version_id == workflow.active_version_id,
        is_current_draft=version_id == workflow.current_version_id,
    )


def parse_time(value: Any) -> datetime:
    """n8n's ISO times ('...Z'), timezone-aware."""
    if not value:
        return datetime.now(UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
