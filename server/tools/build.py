"""The build-workflow tool: compile, validate and save a workspace workflow source."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import Field

from server.errors import UnavailableError
from server.instance.protocols import Workflows
from server.pipeline.build import BuildIssue, BuildOutcome, BuildRequest, WorkflowBuilder
from server.pipeline.work import WorkLoop
from server.pipeline.work_item_machine import Remediation
from server.runtime.hitl import Hitl
from server.tools.approval_cards import APPROVAL_SUMMARY, one_line_summary, workflow_name
from server.tools.scope import check_project
from server.tools.spec import (
    DIRECT_RUN,
    PLANNED_TASK_RUN,
    Suspend,
    ToolContext,
    ToolModel,
    ToolSpec,
)

__all__ = ["TOOLS", "BuildIssueModel", "BuildTools", "BuildWorkflowOutput"]


@dataclass(frozen=True, kw_only=True)
class BuildTools:
    """What build-workflow may touch: the builder, the workflow loop, the permissions and the
    workflows (their names, for the approval card)."""

    builder: WorkflowBuilder
    loop: WorkLoop
    hitl: Hitl
    workflows: Workflows


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
    approval_summary: str | None = Field(None, alias="approvalSummary", **APPROVAL_SUMMARY)


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
    denied: bool | None = Field(None, description="The person declined the save's card")
    reason: str | None = None
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
    refused = await _save_permission(ctx, args, request, target, bound)
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
    ctx: ToolContext[BuildTools],
    args: BuildWorkflowInput,
    request: BuildRequest,
    target: str | None,
    bound: str | None,
) -> BuildWorkflowOutput | None:
    """createWorkflow (no `target`: a new workflow) and updateWorkflow (`target`, an existing
    one) for this build: None to go ahead, else the refusal. Under require_approval the person
    is asked before a new workflow is created (an approval covers that file's retries in this
    thread; "always" covers every new workflow) and before saving into a workflow the file is
    not `bound` to (an "always" answer covers that workflow). A planned task's build runs
    under the plan's approval, as the reference's does; a direct call (no agent, no person to
    ask) creating a workflow is its caller's explicit request and goes ahead."""
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
    if mode == "always_allow" or ctx.run_kind == PLANNED_TASK_RUN or target == bound is not None:
        return None
    if target is None and ctx.run_kind == DIRECT_RUN:
        return None  # a program's own request to build this file (Pipeline, CallTool, MCP)
    if target is not None and not await ctx.services.builder.saves_into(target, ctx.caller):
        return None  # nothing to change: the build says why
    key = update_grant(target) if target else create_grant(args.file_path)
    if await hitl.mode(ctx.thread_id, key) == "always_allow":
        return None
    if ctx.resume is None:
        question = await _save_question(ctx, args, request, target)
        if question is None:
            return None  # the source does not build: nothing will be saved, the build says why
        raise Suspend(question)
    if not ctx.resume.get("approved"):
        return _refused(
            args,
            target,
            "user_denied",
            "The user declined the save approval card: nothing was saved. Do not re-issue the "
            "same save unprompted; acknowledge it, tell them what remains unsaved and ask how "
            "they want to go on.",
            denied=True,
        )
    session = ctx.resume.get("scope") == "session"
    await hitl.always_allow(ctx.thread_id, action if session and target is None else key)
    return None


async def _save_question(
    ctx: ToolContext[BuildTools],
    args: BuildWorkflowInput,
    request: BuildRequest,
    target: str | None,
) -> dict[str, Any] | None:
    """The card for this save: the workflow's name and the nodes it creates, adds or removes,
    read from the checked source (nothing saved); None when the source does not build.
    Without a sandbox to check it in, the card names the file."""
    try:
        checked = (await ctx.services.builder.validate(request)).workflow
    except UnavailableError:
        checked = {}
    if checked is None:
        return None
    nodes = [str(n.get("name")) for n in checked.get("nodes") or [] if isinstance(n, dict)]
    if target is None:
        name = args.name or str(checked.get("name") or "") or _file_title(args.file_path)
        fallback = f'Create "{name}"' + (f" with {_count(nodes)}: {_names(nodes)}" if nodes else "")
    else:
        name = await workflow_name(ctx.services, target, ctx.caller)
        existing = await ctx.services.workflows.get(target, ctx.caller)
        before = {str(n.get("name")) for n in (existing.nodes if existing else [])}
        added = [n for n in nodes if n not in before]
        removed = sorted(before - set(nodes)) if nodes else []
        changes = [
            f"{verb} {_names(names)}"
            for verb, names in (("adds", added), ("removes", removed))
            if names
        ]
        fallback = "Save the changes to this workflow" + (
            f": {'; '.join(changes)}" if changes else ""
        )
    details: dict[str, Any] = {"action": "edit-workflow"}
    if args.approval_summary:
        details["summary"] = args.approval_summary
    question: dict[str, Any] = {
        "inputType": "approval",
        "severity": "warning",
        "message": one_line_summary(args.approval_summary, fallback),
        "resourceName": name,
        "approvalDetails": details,
    }
    return question | ({"workflowId": target} if target else {})


def _count(nodes: list[str]) -> str:
    return f"{len(nodes)} node" + ("" if len(nodes) == 1 else "s")


def _names(nodes: list[str], shown: int = 8) -> str:
    more = len(nodes) - shown
    return ", ".join(nodes[:shown]) + (f" and {more} more" if more > 0 else "")


def create_grant(file_path: str) -> str:
    """An approved creation covers the file's own retries (a fix after a failed compile)."""
    return f"createWorkflow:file:{file_path}"


def _file_title(file_path: str) -> str:
    stem = file_path.rsplit("/", 1)[-1].split(".", 1)[0]
    return stem.replace("-", " ").replace("_", " ").strip() or file_path


def _refused(
    args: BuildWorkflowInput,
    target: str | None,
    reason: str,
    guidance: str,
    *,
    denied: bool = False,
) -> BuildWorkflowOutput:
    """A build that did not run; `denied`: the person said no (said as the reference says it)."""
    said = "User denied the action" if denied else "Action blocked by admin"
    output = BuildWorkflowOutput.of(
        BuildOutcome(
            success=False,
            file_path=args.file_path,
            workflow_id=target,
            work_item_id=args.work_item_id,
            errors=[BuildIssue(message=said, source="permission")],
            remediation=Remediation(
                category="blocked", should_edit=False, reason=reason, guidance=guidance
            ),
        )
    )
    if denied:
        output.denied, output.reason = True, said
    return output


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
