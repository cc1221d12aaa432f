"""Workflow tools over the workflow store (the rest arrive with the domain tools)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from server.domain.workflows import Workflow
from server.errors import UnavailableError
from server.tools.spec import ToolContext, ToolModel, ToolSpec

GROUP = "workflows"


class ListWorkflowsInput(ToolModel):
    query: str | None = Field(None, description="Filter by name")
    limit: int = Field(50, ge=1, le=100)
    status: Literal["active", "archived", "all"] = "active"


class WorkflowHeader(ToolModel):
    id: str
    name: str
    active_version_id: str | None = Field(alias="activeVersionId")
    is_archived: bool = Field(alias="isArchived")


class WorkflowSummary(WorkflowHeader):
    created_at: datetime = Field(alias="createdAt")
    updated_at: datetime = Field(alias="updatedAt")


class ListWorkflowsOutput(ToolModel):
    workflows: list[WorkflowSummary]


async def list_workflows(ctx: ToolContext, args: ListWorkflowsInput) -> ListWorkflowsOutput:
    rows = await ctx.runtime.workflows.listing(
        query=args.query, limit=args.limit, status=args.status
    )
    return ListWorkflowsOutput(
        workflows=[
            WorkflowSummary(
                id=row.id,
                name=row.name,
                active_version_id=row.active_version_id,
                is_archived=row.is_archived,
                created_at=row.created_at,
                updated_at=row.updated_at,
            )
            for row in rows
        ]
    )


class WorkflowIdInput(ToolModel):
    workflow_id: str = Field(alias="workflowId", min_length=1)


class GetWorkflowOutput(WorkflowHeader):
    version_id: str = Field(alias="versionId")
    nodes: list[Any]
    connections: dict[str, Any]
    settings: dict[str, Any]


async def get_workflow(ctx: ToolContext, args: WorkflowIdInput) -> GetWorkflowOutput:
    workflow: Workflow = await ctx.runtime.workflows.require(args.workflow_id)
    return GetWorkflowOutput(
        id=workflow.id,
        name=workflow.name,
        active_version_id=workflow.active_version_id,
        is_archived=workflow.is_archived,
        version_id=workflow.current_version_id,
        nodes=workflow.nodes,
        connections=workflow.connections,
        settings=workflow.settings,
    )


class WorkflowCodeOutput(ToolModel):
    workflow_id: str = Field(alias="workflowId")
    code: str


async def get_workflow_as_code(ctx: ToolContext, args: WorkflowIdInput) -> WorkflowCodeOutput:
    workflow = await ctx.runtime.workflows.require(args.workflow_id)
    toolchain = await ctx.runtime.builder.toolchain(ctx.thread_id)
    generated = await toolchain.workflow_to_code(ctx.thread_id, workflow.as_json())
    if not generated.get("ok"):
        raise UnavailableError(f"generating code failed: {generated.get('message')}")
    return WorkflowCodeOutput(workflow_id=workflow.id, code=generated["code"])


TOOLS = [
    ToolSpec(
        name="list-workflows",
        description="List workflows, newest change first.",
        group=GROUP,
        input_model=ListWorkflowsInput,
        output_model=ListWorkflowsOutput,
        handler=list_workflows,
    ),
    ToolSpec(
        name="get-workflow",
        description="A workflow's full definition: nodes, connections and settings.",
        group=GROUP,
        input_model=WorkflowIdInput,
        output_model=GetWorkflowOutput,
        handler=get_workflow,
    ),
    ToolSpec(
        name="get-workflow-as-code",
        description="A workflow as workflow SDK TypeScript. To change it, write the code to a "
        "workspace file and call build-workflow with that filePath and this workflowId once; "
        "later builds need only filePath.",
        group=GROUP,
        input_model=WorkflowIdInput,
        output_model=WorkflowCodeOutput,
        handler=get_workflow_as_code,
    ),
]
