"""Folders of workflows within a project, and tags on workflows."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from server.errors import InvalidArgumentError, NotFoundError
from server.instance.types import Folder, Tag
from server.store import Database
from server.store.models import FolderRow, TagRow, WorkflowRow, WorkflowTagRow

__all__ = ["FOLDERS", "TAGS", "WORKFLOWS", "WORKFLOW_TAGS", "FolderStore", "TagStore"]

FOLDERS = FolderRow.metadata.tables["folders"]
TAGS = TagRow.metadata.tables["tags"]
WORKFLOW_TAGS = WorkflowTagRow.metadata.tables["workflow_tags"]
WORKFLOWS = WorkflowRow.metadata.tables["workflows"]


def _id() -> str:
    return uuid.uuid4().hex[:16]


class FolderStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def in_project(self, project_id: str) -> list[Folder]:
        async with self.db.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(FOLDERS)
                .where(FOLDERS.c.project_id == project_id)
                .order_by(FOLDERS.c.name)
            )
            return [_folder(row) for row in rows]

    async def get(self, project_id: str, folder_id: str) -> Folder:
        async with self.db.engine.connect() as conn:
            return await _require(conn, folder_id, project_id)

    async def create(self, project_id: str, name: str, parent_folder_id: str | None) -> Folder:
        name = name.strip()
        if not name:
            raise InvalidArgumentError("name: give the folder a name")
        async with self.db.engine.begin() as conn:
            if parent_folder_id is not None:
                parent = await _require(conn, parent_folder_id)
                if parent.project_id != project_id:
                    raise InvalidArgumentError(
                        f"parentFolderId: folder {parent_folder_id!r} is in another project"
                    )
            folder = Folder(
                id=_id(), project_id=project_id, name=name, parent_folder_id=parent_folder_id
            )
            await conn.execute(
                FOLDERS.insert().values(
                    id=folder.id,
                    project_id=project_id,
                    name=name,
                    parent_folder_id=parent_folder_id,
                    created_at=datetime.now(UTC),
                )
            )
            return folder

    async def delete(self, project_id: str, folder_id: str, transfer_to: str | None) -> int:
        """Delete a folder and its subfolders. With `transfer_to`, its workflows and direct
        subfolders move there first; without, its workflows (at any depth) go to the
        project's root, archived. Returns how many workflows were moved or archived."""
        async with self.db.engine.begin() as conn:
            folder = await _require(conn, folder_id, project_id)
            tree = await _subtree(conn, folder_id)
            if transfer_to is not None:
                target = await _require(conn, transfer_to)
                if target.project_id != folder.project_id or target.id in tree:
                    raise InvalidArgumentError(
                        "transferToFolderId: choose a folder of the same project outside the "
                        "one being deleted"
                    )
                moved = await conn.execute(
                    WORKFLOWS.update()
                    .where(WORKFLOWS.c.folder_id == folder_id)
                    .values(folder_id=transfer_to)
                )
                await conn.execute(
                    FOLDERS.update()
                    .where(FOLDERS.c.parent_folder_id == folder_id)
                    .values(parent_folder_id=transfer_to)
                )
                await conn.execute(FOLDERS.delete().where(FOLDERS.c.id == folder_id))
                return int(moved.rowcount)
            archived = await conn.execute(
                WORKFLOWS.update()
                .where(WORKFLOWS.c.folder_id.in_(tree))
                .values(
                    folder_id=None,
                    is_archived=True,
                    active_version_id=None,
                    updated_at=datetime.now(UTC),
                )
            )
            await conn.execute(FOLDERS.delete().where(FOLDERS.c.id.in_(tree)))
            return int(archived.rowcount)

    async def move_workflow(self, workflow_id: str, folder_id: str | None) -> None:
        async with self.db.engine.begin() as conn:
            await conn.execute(
                WORKFLOWS.update().where(WORKFLOWS.c.id == workflow_id).values(folder_id=folder_id)
            )


class TagStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def all(self) -> list[Tag]:
        usage = (
            sa.select(sa.func.count()).where(WORKFLOW_TAGS.c.tag_id == TAGS.c.id).scalar_subquery()
        )
        async with self.db.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(TAGS.c.id, TAGS.c.name, usage).order_by(TAGS.c.name)
            )
            return [Tag(id=r[0], name=r[1], usage_count=int(r[2])) for r in rows]

    async def set_workflow_tags(self, workflow_id: str, names: list[str]) -> list[str]:
        """Replace the workflow's tags with `names`, creating tags that do not exist."""
        wanted = list(dict.fromkeys(n.strip() for n in names))
        bad = [n for n in wanted if not n or len(n) > 64]
        if bad:
            raise InvalidArgumentError("tags: each tag needs 1-64 characters")
        async with self.db.engine.begin() as conn:
            known = {
                r.name: r.id
                for r in await conn.execute(sa.select(TAGS).where(TAGS.c.name.in_(wanted)))
            }
            now = datetime.now(UTC)
            for name in wanted:
                if name not in known:
                    known[name] = _id()
                    await conn.execute(
                        TAGS.insert().values(id=known[name], name=name, created_at=now)
                    )
            await conn.execute(
                WORKFLOW_TAGS.delete().where(WORKFLOW_TAGS.c.workflow_id == workflow_id)
            )
            await conn.execute(
                WORKFLOW_TAGS.insert(),
                [{"workflow_id": workflow_id, "tag_id": known[n]} for n in wanted],
            )
        return wanted


async def _require(conn: AsyncConnection, folder_id: str, project_id: str | None = None) -> Folder:
    """The folder (within `project_id`, when given)."""
    row = (await conn.execute(sa.select(FOLDERS).where(FOLDERS.c.id == folder_id))).first()
    if row is None or (project_id is not None and row.project_id != project_id):
        raise NotFoundError(f"there is no folder {folder_id!r}; list-folders names them")
    return _folder(row)


async def _subtree(conn: AsyncConnection, folder_id: str) -> list[str]:
    """The folder and every folder below it."""
    found = [folder_id]
    frontier = [folder_id]
    while frontier:
        children = await conn.execute(
            sa.select(FOLDERS.c.id).where(FOLDERS.c.parent_folder_id.in_(frontier))
        )
        frontier = [c for c in children.scalars() if c not in found]
        found += frontier
    return found


def _folder(row: sa.Row[tuple[object, ...]]) -> Folder:
    parent = row.parent_folder_id
    return Folder(
        id=str(row.id),
        project_id=str(row.project_id),
        name=str(row.name),
        parent_folder_id=str(parent) if parent else None,
    )
