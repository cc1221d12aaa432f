"""Projects (as the caller's metadata describes them: the n8n backend owns membership),
folders of workflows, tags, and cleaning up test executions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field

from server.core.caller import INSTANCE_SCOPED
from server.errors import NotFoundError
from server.instance import (
    FOLDERS_FEATURE,
    Executions,
    Features,
    Folders,
    Projects,
    Tags,
    Workflows,
)
from server.instance.types import Folder
from server.tools.scope import check_project, visible_workflow
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "ProjectTools"]

GROUP = "projects"


FOLDERS_NEEDED = "an instance with folders (n8n: a licence with feat:folders)"


def _has_folders(services: ProjectTools) -> bool:
    return services.folders is not None and services.features.enabled(FOLDERS_FEATURE)


def _folders(ctx: ToolContext[ProjectTools]) -> Folders:
    """The folder tools are offered only where there are folders (`_has_folders`)."""
    assert ctx.services.folders is not None
    return ctx.services.folders


@dataclass(frozen=True, kw_only=True)
class ProjectTools:
    """What the project, folder and tag tools may touch."""

    projects: Projects
    workflows: Workflows
    executions: Executions
    folders: Folders | None
    features: Features
    tags: Tags


class NoInput(ToolModel):
    pass


class Project(ToolModel):
    id: str
    is_default: bool = Field(alias="isDefault", description="Where new things are created")


class ProjectsOutput(ToolModel):
    projects: list[Project]


async def list_projects(ctx: ToolContext[ProjectTools], _args: NoInput) -> ProjectsOutput:
    caller = ctx.caller
    visible = await ctx.services.projects.visible(caller)
    return ProjectsOutput(
        projects=[Project(id=p, is_default=p == caller.project_id) for p in visible]
    )


class TagModel(ToolModel):
    id: str
    name: str
    usage_count: int = Field(alias="usageCount")


class TagsOutput(ToolModel):
    tags: list[TagModel]


async def list_tags(ctx: ToolContext[ProjectTools], _args: NoInput) -> TagsOutput:
    return TagsOutput(
        tags=[
            TagModel(id=t.id, name=t.name, usage_count=t.usage_count)
            for t in await ctx.services.tags.all()
        ]
    )


class TagWorkflowInput(ToolModel):
    workflow_id: str = Field(alias="workflowId", min_length=1)
    workflow_name: str | None = Field(None, alias="workflowName", description="For the card")
    tags: list[str] = Field(min_length=1, max_length=50, description="Tag names")


class TagWorkflowOutput(ToolModel):
    applied_tags: list[str] = Field(alias="appliedTags")


async def tag_workflow(ctx: ToolContext[ProjectTools], args: TagWorkflowInput) -> TagWorkflowOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    applied = await ctx.services.tags.set_workflow_tags(args.workflow_id, args.tags)
    return TagWorkflowOutput(applied_tags=applied)


class FolderModel(ToolModel):
    id: str
    name: str
    project_id: str = Field(alias="projectId")
    parent_folder_id: str | None = Field(alias="parentFolderId")

    @classmethod
    def of(cls, folder: Folder) -> FolderModel:
        return cls(
            id=folder.id,
            name=folder.name,
            project_id=folder.project_id,
            parent_folder_id=folder.parent_folder_id,
        )


class ProjectInput(ToolModel):
    project_id: str | None = Field(None, alias="projectId", description="Default: the user's")


class FoldersOutput(ToolModel):
    folders: list[FolderModel]


async def list_folders(ctx: ToolContext[ProjectTools], args: ProjectInput) -> FoldersOutput:
    project = check_project(ctx.caller, args.project_id)
    return FoldersOutput(
        folders=[FolderModel.of(f) for f in await _folders(ctx).in_project(project)]
    )


class CreateFolderInput(ProjectInput):
    name: str = Field(min_length=1, max_length=128)
    parent_folder_id: str | None = Field(None, alias="parentFolderId")


async def create_folder(ctx: ToolContext[ProjectTools], args: CreateFolderInput) -> FolderModel:
    project = check_project(ctx.caller, args.project_id)
    if args.parent_folder_id is not None:  # another project's folder does not exist here
        await _visible_folder(ctx, project, args.parent_folder_id)
    folder = await _folders(ctx).create(project, args.name, args.parent_folder_id)
    return FolderModel.of(folder)


async def _visible_folder(ctx: ToolContext[ProjectTools], project: str, folder_id: str) -> Folder:
    folder = await _folders(ctx).get(project, folder_id)
    if not ctx.caller.sees(folder.project_id):
        raise NotFoundError(f"there is no folder {folder_id!r}; list-folders names them")
    return folder


class DeleteFolderInput(ProjectInput):
    folder_id: str = Field(alias="folderId", min_length=1)
    transfer_to_folder_id: str | None = Field(
        None,
        alias="transferToFolderId",
        description="Move the contents here first; omitted: its workflows go to the project "
        "root, archived",
    )


class DeleteFolderOutput(ToolModel):
    success: bool
    affected_workflows: int = Field(alias="affectedWorkflows")


async def delete_folder(
    ctx: ToolContext[ProjectTools], args: DeleteFolderInput
) -> DeleteFolderOutput:
    project = check_project(ctx.caller, args.project_id)
    await _visible_folder(ctx, project, args.folder_id)
    if args.transfer_to_folder_id is not None:
        await _visible_folder(ctx, project, args.transfer_to_folder_id)
    affected = await _folders(ctx).delete(project, args.folder_id, args.transfer_to_folder_id)
    return DeleteFolderOutput(success=True, affected_workflows=affected)


class MoveInput(ProjectInput):
    workflow_id: str = Field(alias="workflowId", min_length=1)
    folder_id: str | None = Field(alias="folderId", description="null: the project's root")


class SuccessOutput(ToolModel):
    success: bool


async def move_workflow(ctx: ToolContext[ProjectTools], args: MoveInput) -> SuccessOutput:
    workflow = await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    if args.folder_id is not None:
        # The folder's project: the one asked for, else the workflow's (an n8n workflow's
        # project is n8n's to know: then the caller's).
        home = ctx.caller.project_of(workflow.project_id)
        project = check_project(ctx.caller, args.project_id or _unless_instance(home))
        folder = await _visible_folder(ctx, project, args.folder_id)
        if folder.project_id != ctx.caller.project_of(workflow.project_id):
            raise NotFoundError(
                f"folder {args.folder_id!r} is not in the workflow's project; list-folders "
                "names those"
            )
    await _folders(ctx).move_workflow(args.workflow_id, args.folder_id)
    return SuccessOutput(success=True)


def _unless_instance(project_id: str) -> str | None:
    return None if project_id == INSTANCE_SCOPED else project_id


class CleanupInput(ToolModel):
    workflow_id: str = Field(alias="workflowId", min_length=1)
    workflow_name: str | None = Field(None, alias="workflowName", description="For the card")
    older_than_hours: float = Field(1, alias="olderThanHours", ge=0, le=24 * 365)


class CleanupOutput(ToolModel):
    deleted_count: int = Field(alias="deletedCount")


async def cleanup_test_executions(
    ctx: ToolContext[ProjectTools], args: CleanupInput
) -> CleanupOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    before = datetime.now(UTC) - timedelta(hours=args.older_than_hours)
    deleted = await ctx.services.executions.delete_test_runs(args.workflow_id, older_than=before)
    return CleanupOutput(deleted_count=deleted)


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="list-projects",
        description="The projects the user can see; new workflows and tables go into the "
        "default one unless a projectId is given.",
        group=GROUP,
        services=ProjectTools,
        input_model=NoInput,
        output_model=ProjectsOutput,
        handler=list_projects,
    ),
    ToolSpec(
        name="list-tags",
        description="The tags in use, with how many workflows carry each.",
        group=GROUP,
        services=ProjectTools,
        input_model=NoInput,
        output_model=TagsOutput,
        handler=list_tags,
    ),
    ToolSpec(
        name="tag-workflow",
        description="Set a workflow's tags by name (replacing its current ones); missing tags "
        "are created.",
        group=GROUP,
        services=ProjectTools,
        input_model=TagWorkflowInput,
        output_model=TagWorkflowOutput,
        handler=tag_workflow,
        hitl_action="tagWorkflow",
        severity="info",
    ),
    ToolSpec(
        name="list-folders",
        description="The folders of a project (default: the user's), with their parents.",
        group=GROUP,
        services=ProjectTools,
        input_model=ProjectInput,
        output_model=FoldersOutput,
        handler=list_folders,
        condition=_has_folders,
        requires=FOLDERS_NEEDED,
    ),
    ToolSpec(
        name="create-folder",
        description="Create a folder in a project, optionally inside another folder.",
        group=GROUP,
        services=ProjectTools,
        input_model=CreateFolderInput,
        output_model=FolderModel,
        handler=create_folder,
        hitl_action="createFolder",
        severity="info",
        condition=_has_folders,
        requires=FOLDERS_NEEDED,
    ),
    ToolSpec(
        name="delete-folder",
        description="Delete a folder. With transferToFolderId its contents move there first; "
        "without, its workflows go to the project root and are archived.",
        group=GROUP,
        services=ProjectTools,
        input_model=DeleteFolderInput,
        output_model=DeleteFolderOutput,
        handler=delete_folder,
        hitl_action="deleteFolder",
        severity="destructive",
        condition=_has_folders,
        requires=FOLDERS_NEEDED,
    ),
    ToolSpec(
        name="move-workflow-to-folder",
        description="Move a workflow into a folder of its project (folderId null: the root).",
        group=GROUP,
        services=ProjectTools,
        input_model=MoveInput,
        output_model=SuccessOutput,
        handler=move_workflow,
        hitl_action="moveWorkflowToFolder",
        condition=_has_folders,
        requires=FOLDERS_NEEDED,
    ),
    ToolSpec(
        name="cleanup-test-executions",
        description="Delete a workflow's finished manual and verification executions older "
        "than olderThanHours (default 1).",
        group=GROUP,
        services=ProjectTools,
        input_model=CleanupInput,
        output_model=CleanupOutput,
        handler=cleanup_test_executions,
        hitl_action="cleanupTestExecutions",
    ),
]
