"""The build-workflow tool: compile, validate and save a workspace workflow source."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import Field

from server.pipeline.build import BuildOutcome, BuildRequest, WorkflowBuilder
from server.pipeline.work import WorkLoop
from server.tools.scope import check_project
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["TOOLS", "BuildIssueModel", "BuildTools", "BuildWorkflowOutput"]


@dataclass(frozen=True, kw_only=True)
class BuildTools:
    """What build-workflow may touch: the builder and the workflow loop."""

    builder: WorkflowBuilder
    loop: WorkLoop


class BuildWorkflowInput(ToolModel):
    file_path: str = Field(
        alias="filePath",
        description="Workspace path of the .workflow.ts or WorkflowJSON source, "
        "e.g. src/order-router.workflow.ts",
    )
    workflow_id: str | None = Field(
        None,
        alias="workflowId",
        description="Existing workflow to bind this file to (first build of the file only)",
    )
    project_id: str | None = Field(None, alias="projectId")
    name: str | None = Field(None, description="Workflow name override")
    work_item_id: str | None = Field(None, alias="workItemId")
    is_supporting_workflow: bool = Field(False, alias="isSupportingWorkflow")


class BuildIssueModel(ToolModel):
    message: str
    source: str
    code: str | None = None
    node_name: str | None = Field(None, alias="nodeName")
    path: str | None = None
    line: int | None = None
    column: int | None = None
    file: str | None = None


class RemediationModel(ToolModel):
    category: str
    should_edit: bool = Field(alias="shouldEdit")
    guidance: str
    reason: str | None = None
    remaining_submit_fixes: int | None = Field(None, alias="remainingSubmitFixes")


class BuildWorkflowOutput(ToolModel):
    success: bool
    file_path: str = Field(alias="filePath")
    workflow_id: str | None = Field(None, alias="workflowId")
    workflow_name: str | None = Field(None, alias="workflowName")
    work_item_id: str | None = Field(None, alias="workItemId")
    source_hash: str | None = Field(None, alias="sourceHash")
    remediation: RemediationModel | None = None
    errors: list[BuildIssueModel] = Field(default_factory=list)
    warnings: list[BuildIssueModel] = Field(default_factory=list)
    # Credentials no single usable credential matched: taken off these nodes until
    # apply-workflow-credentials puts real ones on; verification simulates the nodes.
    mocked_credential_types: list[str] = Field(default_factory=list, alias="mockedCredentialTypes")
    mocked_node_names: list[str] = Field(default_factory=list, alias="mockedNodeNames")
    credential_note: str | None = Field(None, alias="credentialNote")

    @classmethod
    def of(cls, outcome: BuildOutcome) -> BuildWorkflowOutput:
        return cls(
            success=outcome.success,
            file_path=outcome.file_path,
            workflow_id=outcome.workflow_id,
            workflow_name=outcome.workflow_name,
            work_item_id=outcome.work_item_id,
            source_hash=outcome.source_hash,
            remediation=RemediationModel(**asdict(outcome.remediation))
            if outcome.remediation
            else None,
            errors=[BuildIssueModel(**asdict(issue)) for issue in outcome.errors],
            warnings=[BuildIssueModel(**asdict(issue)) for issue in outcome.warnings],
            mocked_credential_types=outcome.mocked_credential_types,
            mocked_node_names=list(outcome.mocked_credentials),
            credential_note=outcome.credential_note,
        )


async def build_workflow(
    ctx: ToolContext[BuildTools], args: BuildWorkflowInput
) -> BuildWorkflowOutput:
    request = BuildRequest(
        thread_id=ctx.thread_id,
        file_path=args.file_path,
        workflow_id=args.workflow_id or None,
        project_id=check_project(ctx.caller, args.project_id or None),
        name=args.name or None,
        work_item_id=args.work_item_id or None,
        is_supporting_workflow=args.is_supporting_workflow,
        caller=ctx.caller,
    )
    if request.work_item_id:  # an unknown work item is refused before anything is built
        await ctx.services.loop.load(ctx.thread_id, request.work_item_id)
    # The file's work item is looked up while the build runs.
    item = asyncio.ensure_future(ctx.services.loop.item_for_build(request))
    try:
        outcome = await ctx.services.builder.build(request)
    finally:
        if not item.done():
            await asyncio.wait([item])
    outcome = await ctx.services.loop.after_build(request, outcome, await item)
    return BuildWorkflowOutput.of(outcome)


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="build-workflow",
        description="Compile, validate and save a workspace workflow source file. Inline source "
        "is not accepted: edit the workspace file first, then pass its filePath. The first "
        "successful build of a file creates a workflow (or binds to workflowId); later builds "
        "of the same file save new versions of it.",
        group="workflows",
        services=BuildTools,
        input_model=BuildWorkflowInput,
        output_model=BuildWorkflowOutput,
        handler=build_workflow,
    )
]
