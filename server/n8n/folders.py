"""n8n's folders (licensed: offered only while `N8nFeatures` finds `feat:folders`), within
n8n's projects. Like the other n8n objects, a folder carries the project INSTANCE_SCOPED: what
a call sees is what its key may see in n8n.

n8n takes the alias `personal` (the calling key's own project) only when creating a folder;
elsewhere it wants the project's id, which the n8n backend sends as the caller's project."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from server.core.caller import DEFAULT_PROJECT, INSTANCE_SCOPED
from server.errors import FailedPreconditionError, NotFoundError
from server.instance.types import Folder
from server.n8n.client import N8nClient
from server.n8n.workflows import N8nWorkflows

__all__ = ["N8nFolders"]

_PAGE = 100


class N8nFolders:
    def __init__(self, client: N8nClient, workflows: N8nWorkflows) -> None:
        self.client = client
        self.workflows = workflows

    async def in_project(self, project_id: str) -> list[Folder]:
        path = _folders_path(_project_id(project_id))
        found: list[Folder] = []
        while True:
            page = await self.client.get(path, skip=len(found), take=_PAGE)
            found += [_folder(f) for f in page.get("data") or []]
            if not page.get("data") or len(found) >= int(page.get("count") or 0):
                return sorted(found, key=lambda f: (f.name, f.id))

    async def get(self, project_id: str, folder_id: str) -> Folder:
        path = f"{_folders_path(_project_id(project_id))}/{quote(folder_id, safe='')}"
        try:
            return _folder(await self.client.get(path))
        except NotFoundError:
            raise NotFoundError(
                f"there is no folder {folder_id!r}; list-folders names them"
            ) from None

    async def create(self, project_id: str, name: str, parent_folder_id: str | None) -> Folder:
        body: dict[str, Any] = {"name": name}
        if parent_folder_id is not None:
            body["parentFolderId"] = parent_folder_id
        # n8n resolves `personal` to the key's own project here (and only here).
        return _folder(await self.client.post(_folders_path(project_id), body))

    async def delete(self, project_id: str, folder_id: str, transfer_to: str | None) -> int:
        path = f"{_folders_path(_project_id(project_id))}/{quote(folder_id, safe='')}"
        details = await self.client.get(path)
        await self.client.delete(path, transferToFolderId=transfer_to)
        return int(details.get("totalWorkflows") or 0)

    async def move_workflow(self, workflow_id: str, folder_id: str | None) -> None:
        await self.workflows.move_to_folder(workflow_id, folder_id)


def _project_id(project_id: str) -> str:
    if project_id == DEFAULT_PROJECT:
        raise FailedPreconditionError(
            "n8n names the personal project only when creating a folder; pass projectId (the "
            "n8n project's id) or send it as the caller's project (x-instance-ai-project)"
        )
    return project_id


def _folders_path(project_id: str) -> str:
    return f"/projects/{quote(project_id, safe='')}/folders"


def _folder(found: dict[str, Any]) -> Folder:
    return Folder(
        id=str(found["id"]),
        project_id=INSTANCE_SCOPED,
        name=str(found["name"]),
        parent_folder_id=found.get("parentFolderId"),
    )
