"""The build-workflow tool: compile, validate and save a workspace workflow source."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import Field

from server.pipeline.build import BuildOutcome, BuildRequest, WorkflowBuilder
from server.pipeline.work import WorkLoop
from server.pipeline.work_item_machine import Remediation
from server.runtime.hitl import Hitl
from server.tools.scope import check_project
from server.tools.spec import PLANNED_TASK_RUN, Suspend, ToolContext, ToolModel, ToolSpec

__all__ = ["TOOLS", "BuildIssueModel", "BuildTools", "BuildWorkflowOutput"]


@dataclass(frozen=True, kw_only=True)
class BuildTools:
    """What build-workflow may touch: the builder, the workflow loop and the permissions."""

    builder: WorkflowBuilder
    loop: WorkLoop
    hitl: Hitl


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
    trigger_only: bool = Field(
        False,
        alias="triggerOnly",
        description="Only event triggers a test run cannot fire: done once saved (no verify)",
    )

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
            trigger_only=outcome.success and outcome.trigger_only,
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
    bound = await ctx.services.builder.bound_workflow(ctx.thread_id, args.file_path)
    target = request.workflow_id or bound
    refused = await _save_permission(ctx, args, target, bound)
    if refused is not None:
        return refused
    # The file's work item is looked up while the build runs.
    item = asyncio.ensure_future(ctx.services.loop.item_for_build(request))
    try:
        outcome = await ctx.services.builder.build(request)
    finally:
        if not item.done():
            await asyncio.wait([item])
    outcome = await ctx.services.loop.after_build(request, outcome, await item)
    if outcome.success and outcome.workflow_id and target is None:
        # The thread's own workflow: its later builds (from any file) change it unasked.
        await ctx.services.hitl.always_allow(ctx.thread_id, update_grant(outcome.workflow_id))
    return BuildWorkflowOutput.of(outcome)


def update_grant(workflow_id: str) -> str:
    """The per-workflow "always" grant of updateWorkflow (as the registry keys it)."""
    return f"updateWorkflow:workflow:{workflow_id}"


async def _save_permission(
    ctx: ToolContext[BuildTools], args: BuildWorkflowInput, target: str | None, bound: str | None
) -> BuildWorkflowOutput | None:
    """createWorkflow (no `target`: a new workflow) and updateWorkflow (`target`, an existing
    one) for this build: None to go ahead, else the refusal. Saving into a workflow the file
    is not `bound` to asks the person first (an "always" answer covers that workflow in this
    thread); a new workflow, or the file's own, is refused only when blocked."""
    hitl = ctx.services.hitl
    action = "updateWorkflow" if target else "createWorkflow"
    mode = await hitl.mode(ctx.thread_id, action)
    if mode == "blocked":
        return _refused(
            args,
            target,
            "permission_blocked",
            f"Saving this workflow is blocked by the administrator ({action}: blocked in "
            "INSTANCE_AI_PERMISSIONS): nothing was saved. Do not retry; tell the user.",
        )
    if target is None or target == bound or mode == "always_allow":
        return None
    key = update_grant(target)
    if ctx.run_kind == PLANNED_TASK_RUN or await hitl.mode(ctx.thread_id, key) == "always_allow":
        return None
    if not await ctx.services.builder.saves_into(target, ctx.caller):
        return None  # nothing to change: the build says why
    if ctx.resume is None:
        raise Suspend(
            {
                "inputType": "approval",
                "severity": "warning",
                "message": f"Save the changes from {args.file_path} into workflow {target}?",
            }
        )
    if not ctx.resume.get("approved"):
        return _refused(
            args,
            target,
            "user_denied",
            "The user declined saving into this workflow: nothing was saved. Do not re-issue "
            "the same save unprompted; tell them what remains unsaved and ask how to go on.",
        )
    if ctx.resume.get("scope") == "session":
        await hitl.always_allow(ctx.thread_id, key)
    return None


def _refused(
    args: BuildWorkflowInput, target: str | None, reason: str, guidance: str
) -> BuildWorkflowOutput:
    return BuildWorkflowOutput.of(
        BuildOutcome(
            success=False,
            file_path=args.file_path,
            workflow_id=target,
            work_item_id=args.work_item_id,
            remediation=Remediation(
                category="blocked", should_edit=False, reason=reason, guidance=guidance
            ),
        )
    )


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
        # createWorkflow too: both applied by the tool itself (see _save_permission).
        hitl_action="updateWorkflow",
        self_gated=True,
        may_ask=True,
    )
]
