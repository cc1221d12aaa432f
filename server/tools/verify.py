"""Verification and the workflow loop: verify a built workflow, report a verdict, read a work
item, and put real credentials on nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from server.instance import Workflows
from server.pipeline.build import WorkflowBuilder
from server.pipeline.verify import MAX_PREVIEW_CHARS, Verifier, VerifyRequest
from server.pipeline.work import WorkLoop
from server.pipeline.work_item_machine import (
    MAX_POST_SUBMIT_REMEDIATION_SUBMITS,
    MAX_PRE_SAVE_SUBMIT_FAILURES,
    MAX_VERIFY_ATTEMPTS,
    Action,
    LoopState,
    Remediation,
    VerdictReport,
)
from server.tools.scope import visible_workflow
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "VerdictOutput", "VerifyTools"]

GROUP = "verification"


@dataclass(frozen=True, kw_only=True)
class VerifyTools:
    """What the verification tools may touch."""

    workflows: Workflows
    verifier: Verifier
    loop: WorkLoop
    builder: WorkflowBuilder


class VerifyInput(ToolModel):
    workflow_id: str = Field(alias="workflowId", min_length=1)
    work_item_id: str | None = Field(
        None, alias="workItemId", description="Default: the latest work item of the workflow"
    )
    input_data: dict[str, Any] | None = Field(None, alias="inputData")
    trigger_node_name: str | None = Field(
        None, alias="triggerNodeName", description="Verify one trigger (default: each in turn)"
    )
    timeout: int = Field(300_000, ge=1_000, le=600_000, description="Per pass, in ms")
    fixture_overrides: dict[str, list[dict[str, Any]]] | None = Field(
        None,
        alias="fixtureOverrides",
        description="Items for simulated nodes, by node name (only nodes the build's plan "
        "simulates); an empty list is refused unless the node is in allowZeroItemFixtures",
    )
    allow_zero_item_fixtures: list[str] | None = Field(
        None,
        alias="allowZeroItemFixtures",
        description="Nodes whose fixtureOverrides entry may be empty. Zero items stop every "
        "node below, so the run passes while verifying nothing: list a node only when the "
        "empty branch is what you verify, and say so",
    )
    fix_target_node_names: list[str] | None = Field(
        None,
        alias="fixTargetNodeNames",
        description="The nodes this change is about (the one the user reported failing, the "
        "one you just repaired): the claim stays unproven unless each ran for real, so a green "
        "run elsewhere is no proof for them. Pass them whenever you fix a specific node",
    )
    include_data: bool = Field(
        False,
        alias="includeData",
        description="Also return each node's output (data). Only when you need it",
    )
    max_data_chars: int | None = Field(
        None,
        alias="maxDataChars",
        ge=0,
        le=20_000,
        description=f"Characters of each node preview (default {MAX_PREVIEW_CHARS})",
    )


class VerifyOutput(ToolModel):
    work_item_id: str | None = Field(None, alias="workItemId")
    execution_id: str | None = Field(None, alias="executionId")
    execution_ids: list[str] = Field(default_factory=list, alias="executionIds")
    success: bool
    status: str
    nodes_executed: int = Field(0, alias="nodesExecuted")
    last_node_executed: str | None = Field(None, alias="lastNodeExecuted")
    node_previews: list[dict[str, Any]] = Field(default_factory=list, alias="nodePreviews")
    simulated_nodes: list[str] = Field(default_factory=list, alias="simulatedNodes")
    simulation_note: str | None = Field(None, alias="simulationNote")
    node_errors: list[dict[str, Any]] = Field(default_factory=list, alias="nodeErrors")
    nodes_not_reached: list[str] = Field(default_factory=list, alias="nodesNotReached")
    claim: dict[str, Any] | None = None
    data: dict[str, Any] | None = Field(
        None, description="With includeData: each node's output (cut to fit)"
    )
    remediation: dict[str, Any] | None = None
    failure_signature: str | None = Field(None, alias="failureSignature")
    failed_node_name: str | None = Field(None, alias="failedNodeName")
    error: str | None = None
    guidance: str


async def verify_built_workflow(ctx: ToolContext[VerifyTools], args: VerifyInput) -> VerifyOutput:
    result = await ctx.services.verifier.verify(
        VerifyRequest(
            thread_id=ctx.thread_id,
            workflow_id=args.workflow_id,
            work_item_id=args.work_item_id,
            input_data=args.input_data,
            trigger_node_name=args.trigger_node_name,
            timeout_s=args.timeout / 1000,
            fixture_overrides=args.fixture_overrides,
            allow_zero_item_fixtures=tuple(args.allow_zero_item_fixtures or ()),
            fix_target_node_names=tuple(args.fix_target_node_names or ()),
            include_data=args.include_data,
            max_data_chars=MAX_PREVIEW_CHARS
            if args.max_data_chars is None
            else args.max_data_chars,
            caller=ctx.caller,
        )
    )
    return VerifyOutput.model_validate(result)


class RemediationInput(ToolModel):
    category: Literal["code_fixable", "needs_setup", "blocked"]
    should_edit: bool = Field(alias="shouldEdit")
    guidance: str
    reason: str | None = None


class VerdictInput(ToolModel):
    work_item_id: str = Field(alias="workItemId", min_length=1)
    workflow_id: str = Field(alias="workflowId", min_length=1)
    verdict: Literal[
        "verified",
        "needs_patch",
        "needs_rebuild",
        "trigger_only",
        "needs_user_input",
        "failed_terminal",
    ]
    workflow_inspection: str = Field(
        alias="workflowInspection",
        min_length=1,
        description="What you checked in the saved workflow and the run (required)",
    )
    summary: str = ""
    run_id: str | None = Field(None, alias="runId")
    execution_id: str | None = Field(None, alias="executionId")
    failure_signature: str | None = Field(None, alias="failureSignature")
    failed_node_name: str | None = Field(None, alias="failedNodeName")
    diagnosis: str | None = None
    patch: str | None = None
    remediation: RemediationInput | None = None


class VerdictOutput(ToolModel):
    work_item_id: str = Field(alias="workItemId")
    action: str
    phase: str
    status: str
    claim: dict[str, Any] | None = None
    guidance: str


async def report_verification_verdict(
    ctx: ToolContext[VerifyTools], args: VerdictInput
) -> VerdictOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    remediation = (
        Remediation(
            category=args.remediation.category,
            should_edit=args.remediation.should_edit,
            guidance=args.remediation.guidance,
            reason=args.remediation.reason,
        )
        if args.remediation
        else None
    )
    state, action, outcome = await ctx.services.loop.report_verdict(
        ctx.thread_id,
        args.work_item_id,
        args.workflow_id,
        VerdictReport(
            verdict=args.verdict,
            run_id=args.run_id,
            execution_id=args.execution_id,
            failure_signature=args.failure_signature,
            failed_node_name=args.failed_node_name,
            diagnosis=args.diagnosis,
            patch=args.patch,
            remediation=remediation,
        ),
    )
    # The claim is what the evidence showed; a verdict cannot upgrade it.
    claim = (outcome.get("verification") or {}).get("claim")
    return VerdictOutput(
        work_item_id=state.work_item_id,
        action=action.kind,
        phase=state.phase,
        status=state.status,
        claim=claim,
        guidance=guidance(action, state, claim),
    )


def guidance(action: Action, state: LoopState, claim: dict[str, Any] | None) -> str:
    """What to do next, by the loop's action (the reference's intent, in our words)."""
    source = state.source_file_path or "the source file"
    if action.kind == "ignored":
        return f"Ignored: {action.reason}. Nothing changed."
    if action.kind == "continue_building":
        return f"BUILD FAILED. Edit {source} and build it again with the same filePath."
    if action.kind == "verify":
        return (
            f"Saved, not yet verified. Call verify-built-workflow with workflowId "
            f"{action.workflow_id} and workItemId {state.work_item_id}, then report the verdict."
        )
    if action.kind == "patch":
        return (
            f"Fix node '{action.failed_node_name}' in {source} "
            f"({action.diagnosis or 'see the run'}), build it again with workflowId "
            f"{action.workflow_id} and workItemId "
            f"{state.work_item_id}, then verify again."
        )
    if action.kind == "rebuild":
        return (
            f"Rebuild: {action.failure_details}. Edit {source}, build it again with workflowId "
            f"{action.workflow_id} and workItemId {state.work_item_id}, then verify again."
        )
    if action.kind == "blocked":
        return f"Blocked: {action.reason}. Stop editing; explain this to the user and ask."
    level = (claim or {}).get("level")
    if level == "verified":
        return "Done: verified successfully. Report completion."
    if level is None:
        return "Done, but there is no verification evidence: do not say it was verified."
    not_covered = ", ".join(
        (claim or {}).get("simulatedNodes", []) + (claim or {}).get("nodesNotReached", [])
    )
    return (
        f"Done with a {level} claim: {not_covered or 'some nodes'} were simulated or not reached. "
        "Do not call it verified, working or ready to publish; offer a live test."
    )


class WorkItemInput(ToolModel):
    work_item_id: str = Field(alias="workItemId", min_length=1)


class AttemptModel(ToolModel):
    """One attempt of the work item's loop, in the keys a client sees everywhere (camelCase)."""

    phase: str
    attempt: int
    action: str
    result: str
    workflow_id: str | None = Field(None, alias="workflowId")
    execution_id: str | None = Field(None, alias="executionId")
    failure_signature: str | None = Field(None, alias="failureSignature")
    diagnosis: str | None = None
    created_at: str = Field(alias="createdAt")


class WorkItemOutput(ToolModel):
    work_item_id: str = Field(alias="workItemId")
    workflow_id: str | None = Field(None, alias="workflowId")
    source_file_path: str | None = Field(None, alias="sourceFilePath")
    phase: str
    status: str
    budgets: dict[str, int]
    attempts: list[AttemptModel]
    outcome: dict[str, Any]
    obligation: dict[str, Any]


def obligation(state: LoopState, outcome: dict[str, Any]) -> dict[str, Any]:
    """Whether the work item still owes a verification (the completion gate)."""
    record = outcome.get("verification") or {}
    claim = record.get("claim") or {}
    if not outcome:
        status = "pending_build"
    elif not outcome.get("submitted"):
        status = "blocked"
    elif record.get("status") == "running":
        status = "verifying"
    elif record.get("success") and not claim.get("nodesNotReached"):
        status = "verified"
    elif record.get("remediationCategory") == "needs_setup":
        status = "needs_setup"
    elif record.get("attempted"):
        status = "not_verifiable"
    elif state.status == "blocked":
        status = "blocked"
    else:
        status = "ready_to_verify"
    return {
        "status": status,
        "settled": status not in ("pending_build", "ready_to_verify", "verifying"),
    }


async def get_work_item(ctx: ToolContext[VerifyTools], args: WorkItemInput) -> WorkItemOutput:
    item, state = await ctx.services.loop.load(ctx.thread_id, args.work_item_id)
    return WorkItemOutput(
        work_item_id=item.id,
        workflow_id=item.workflow_id,
        source_file_path=item.source_file_path,
        phase=state.phase,
        status=state.status,
        budgets={
            "preSaveSubmitFailures": state.pre_save_submit_failures,
            "maxPreSaveSubmitFailures": MAX_PRE_SAVE_SUBMIT_FAILURES,
            "postSubmitRemediationSubmitsUsed": state.post_submit_remediation_submits_used,
            "maxPostSubmitRemediationSubmits": MAX_POST_SUBMIT_REMEDIATION_SUBMITS,
            "verifyAttempts": state.verify_attempts,
            "maxVerifyAttempts": MAX_VERIFY_ATTEMPTS,
        },
        attempts=[AttemptModel.model_validate(a) for a in item.state.get("attempts", [])],
        outcome=item.outcome,
        obligation=obligation(state, item.outcome),
    )


class CredentialRef(ToolModel):
    id: str = Field(min_length=1)
    name: str | None = Field(None, description="Informational; the id decides")


class ApplyCredentialsInput(ToolModel):
    workflow_id: str = Field(alias="workflowId", min_length=1)
    work_item_id: str = Field(alias="workItemId", min_length=1)
    credentials: dict[str, dict[str, CredentialRef]] = Field(
        description="By node name: credential type → {id, name}"
    )


class ApplyCredentialsOutput(ToolModel):
    updated_nodes: list[str] = Field(alias="updatedNodes")


async def apply_workflow_credentials(
    ctx: ToolContext[VerifyTools], args: ApplyCredentialsInput
) -> ApplyCredentialsOutput:
    workflow = await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    await ctx.services.loop.load(ctx.thread_id, args.work_item_id, workflow_id=args.workflow_id)
    mapping = {
        node: {kind: ref.id for kind, ref in refs.items()}
        for node, refs in args.credentials.items()
    }
    updated = await ctx.services.builder.apply_credentials(workflow, mapping, caller=ctx.caller)
    return ApplyCredentialsOutput(updated_nodes=updated)


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="verify-built-workflow",
        description="Run the built workflow in the sandbox with side effects simulated (the "
        "build's plan), each trigger in turn, and report what ran, what was simulated, what was "
        "not reached, and the claim the evidence supports. Overrides only for simulated nodes.",
        group=GROUP,
        services=VerifyTools,
        input_model=VerifyInput,
        output_model=VerifyOutput,
        handler=verify_built_workflow,
    ),
    ToolSpec(
        name="report-verification-verdict",
        description="Report your verdict on a verification (verified, needs_patch, "
        "needs_rebuild, trigger_only, needs_user_input, failed_terminal) and get what to do next.",
        group=GROUP,
        services=VerifyTools,
        input_model=VerdictInput,
        output_model=VerdictOutput,
        handler=report_verification_verdict,
    ),
    ToolSpec(
        name="get-work-item",
        description="A work item's phase, budgets, attempts, build outcome and whether it still "
        "owes a verification.",
        group=GROUP,
        services=VerifyTools,
        input_model=WorkItemInput,
        output_model=WorkItemOutput,
        handler=get_work_item,
    ),
    ToolSpec(
        name="apply-workflow-credentials",
        description="Put real credentials on named nodes of a built workflow, all or none, as a "
        "new version.",
        group=GROUP,
        services=VerifyTools,
        input_model=ApplyCredentialsInput,
        output_model=ApplyCredentialsOutput,
        handler=apply_workflow_credentials,
    ),
]
