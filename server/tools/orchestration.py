"""Orchestration tools: plans, the task checklist, questions to the user, and background
tasks. Only the orchestrator has them (background agents get the domain tools)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from server.errors import FailedPreconditionError
from server.runtime.background import BackgroundTasks
from server.runtime.plans import Plans, PlanValidationError
from server.tools.spec import Suspend, ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "OrchestrationTools"]

GROUP = "orchestration"


@dataclass(frozen=True, kw_only=True)
class OrchestrationTools:
    """What the orchestration tools may touch (the agent itself comes as
    `ctx.orchestration`)."""

    plans: Plans
    background: BackgroundTasks


class PlannedTask(ToolModel):
    id: str = Field(min_length=1, max_length=64, description="Stable id used by dependency edges")
    title: str = Field(min_length=1, max_length=200, description="Short user-facing title")
    kind: Literal["delegate", "build-workflow", "checkpoint"]
    spec: str = Field(min_length=1, description="Detailed executor briefing for this task")
    deps: list[str] = Field(description="Task ids that must succeed before this one starts")
    workflow_id: str | None = Field(None, alias="workflowId")
    is_supporting_workflow: bool | None = Field(None, alias="isSupportingWorkflow")
    claim: Literal["verified", "partial"] | None = Field(
        None,
        description="build-workflow only: the verification the built workflow must reach for "
        "the task to succeed: verified (every node ran for real) or partial (passed with "
        "side-effect nodes simulated; the default)",
    )


class PlanningContext(ToolModel):
    source: Literal["planning-skill", "replan"]
    summary: str = Field(min_length=1)
    assumptions: list[str] | None = Field(
        None, description="Important assumptions behind the plan (shown with it, told to each task)"
    )
    post_build_run_requested: bool | None = Field(
        None,
        alias="postBuildRunRequested",
        description="The user asked for the built workflows to be run once built",
    )


class CreateTasksInput(ToolModel):
    tasks: list[PlannedTask] = Field(min_length=1, max_length=50)
    planning_context: PlanningContext = Field(alias="planningContext")


class ResultOutput(ToolModel):
    result: str


class CreateTasksOutput(ToolModel):
    result: str
    task_count: int = Field(alias="taskCount")


async def create_tasks(
    ctx: ToolContext[OrchestrationTools], args: CreateTasksInput
) -> CreateTasksOutput:
    plans = ctx.services.plans
    tasks = [t.model_dump(by_alias=True, exclude_none=True) for t in args.tasks]
    if ctx.resume is None:
        expected = "replan" if ctx.run_kind == "replan" else "planning-skill"
        if args.planning_context.source != expected:
            raise PlanValidationError(
                f'planningContext.source must be "{expected}" in this turn. Revise the plan '
                "and call create-tasks again."
            )
        earlier = await plans.get(ctx.thread_id)
        if (
            earlier is not None
            and earlier.status == "cancelled"
            and earlier.message_group_id is not None
            and earlier.message_group_id == ctx.message_group_id
        ):
            raise FailedPreconditionError(
                "The user denied a plan in this turn; do not submit another. Ask what they "
                "want instead."
            )
        try:
            plan = await plans.propose(
                ctx.thread_id,
                run_id=ctx.run_id or "",
                message_group_id=ctx.message_group_id,
                tasks=tasks,
                context=args.planning_context.model_dump(by_alias=True, exclude_none=True),
            )
        except PlanValidationError as exc:
            raise PlanValidationError(
                f"{exc}. Revise the plan and call create-tasks again."
            ) from None
        assumptions = args.planning_context.assumptions or []
        raise Suspend(
            {
                "inputType": "plan-review",
                "severity": "info",
                "message": f"Review the plan: {args.planning_context.summary}"
                + (
                    "\n\nAssumptions:\n" + "\n".join(f"- {a}" for a in assumptions)
                    if assumptions
                    else ""
                ),
                "tasks": {"tasks": plan.checklist},
                "planItems": tasks,
            }
        )
    answer = ctx.resume
    if answer.get("approved"):
        await plans.set_status(ctx.thread_id, "active", run_id=ctx.run_id)
        started = 0
        if ctx.orchestration is not None:
            started = await ctx.orchestration.schedule_plan(ctx.thread_id, ctx.run_id, ctx.caller)
        return CreateTasksOutput(
            result=f"Plan approved: {len(tasks)} {'task' if len(tasks) == 1 else 'tasks'}, "
            f"{started} started.",
            task_count=len(tasks),
        )
    if answer.get("denied"):
        await plans.set_status(ctx.thread_id, "cancelled", run_id=ctx.run_id)
        return CreateTasksOutput(
            result="The user denied the plan. Do not submit it again in this turn; ask what "
            "they want instead.",
            task_count=len(tasks),
        )
    await plans.set_status(ctx.thread_id, "awaiting_approval", run_id=ctx.run_id)
    feedback = answer.get("userInput") or "(no details given)"
    return CreateTasksOutput(
        result=f"The user asked for changes: {feedback}. Revise the plan and call "
        "create-tasks again.",
        task_count=len(tasks),
    )


class CompleteCheckpointInput(ToolModel):
    task_id: str = Field(
        alias="taskId",
        min_length=1,
        description="The checkpoint task id from the <planned-task-follow-up> block",
    )
    status: Literal["succeeded", "failed"] = Field(
        description="Whether the check passed (succeeded) or not (failed)"
    )
    result: str | None = Field(
        None, max_length=2000, description="A short note for the user on what the check found"
    )
    error: str | None = Field(None, max_length=2000, description="Why it failed (status failed)")
    outcome: dict[str, Any] | None = Field(
        None,
        description="The evidence: executionId, failing node, a data excerpt ...",
    )


class CompleteCheckpointOutput(ToolModel):
    ok: bool
    result: str


async def complete_checkpoint(
    ctx: ToolContext[OrchestrationTools], args: CompleteCheckpointInput
) -> CompleteCheckpointOutput:
    """Settles a running checkpoint; a failed one fails (cancels) what depends on it, and the
    plan goes to a replan when its run ends."""
    changes: dict[str, Any] = {"status": args.status}
    if args.outcome is not None:
        changes["outcome"] = args.outcome
    if args.status == "succeeded":
        changes["result"] = args.result or "Checkpoint passed"
    else:
        changes["error"] = args.error or args.result or "Checkpoint failed"
    await ctx.services.plans.settle_checkpoint(
        ctx.thread_id, args.task_id, run_id=ctx.run_id, **changes
    )
    said = "passed" if args.status == "succeeded" else "failed; its dependants are cancelled"
    return CompleteCheckpointOutput(ok=True, result=f"Checkpoint {args.task_id} {said}.")


class ChecklistItem(ToolModel):
    id: str = Field(min_length=1)
    description: str = Field(min_length=1)
    status: Literal["todo", "in_progress", "done", "failed", "cancelled"]
    detail: str | None = None


class UpdateTasksInput(ToolModel):
    tasks: list[ChecklistItem] = Field(max_length=100)


async def update_tasks(
    ctx: ToolContext[OrchestrationTools], args: UpdateTasksInput
) -> ResultOutput:
    items = [t.model_dump(exclude_none=True) for t in args.tasks]
    await ctx.services.plans.save_checklist(ctx.thread_id, items, run_id=ctx.run_id)
    return ResultOutput(result=f"Checklist saved ({len(items)} items).")


class Question(ToolModel):
    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    type: Literal["single", "multi", "text"]
    options: list[str] | None = Field(None, description="Choices for single and multi")


class AskUserInput(ToolModel):
    questions: list[Question] = Field(min_length=1, max_length=10)
    intro_message: str | None = Field(None, alias="introMessage")


class AskUserOutput(ToolModel):
    answered: bool
    answers: list[dict[str, Any]] = Field(default_factory=list)


async def ask_user(ctx: ToolContext[OrchestrationTools], args: AskUserInput) -> AskUserOutput:
    if ctx.resume is None:
        raise Suspend(
            {
                "inputType": "questions",
                "severity": "info",
                "message": args.intro_message or "The assistant has a question",
                "introMessage": args.intro_message or "",
                "questions": [q.model_dump(exclude_none=True) for q in args.questions],
            }
        )
    answers = ctx.resume.get("answers", [])
    if not ctx.resume.get("approved", True) or not answers:
        return AskUserOutput(answered=False)
    return AskUserOutput(answered=True, answers=answers)


class DelegateInput(ToolModel):
    role: str = Field(min_length=1, max_length=64, description="Short role, e.g. researcher")
    kind: Literal["builder", "data-table", "planner"] | None = Field(
        None,
        description="What the agent does, for its card: builder (workflows), data-table, "
        "planner; omit for anything else (research, checks)",
    )
    briefing: str = Field(min_length=1, description="Everything the agent needs to do the task")
    workflow_id: str | None = Field(None, alias="workflowId", description="Workflow it works on")


class DelegateOutput(ToolModel):
    result: str
    task_id: str | None = Field(None, alias="taskId")


async def delegate(ctx: ToolContext[OrchestrationTools], args: DelegateInput) -> DelegateOutput:
    if ctx.orchestration is None:
        raise FailedPreconditionError("background tasks need the agent; use SendMessage")
    key = f"{args.role}:{args.workflow_id}" if args.workflow_id else None
    spawned = await ctx.orchestration.delegate(
        ctx.thread_id,
        ctx.run_id,
        role=args.role,
        briefing=args.briefing,
        key=key,
        caller=ctx.caller,
        kind=args.kind,
        workflow_id=args.workflow_id,
    )
    status = spawned["status"]
    if status == "limit-reached":
        limit = ctx.services.background.limit
        return DelegateOutput(result=f"limit of {limit} concurrent tasks reached; wait for one")
    if status == "duplicate":
        return DelegateOutput(result="a task for this already runs", task_id=spawned["taskId"])
    return DelegateOutput(
        result=f"Started background task {spawned['taskId']}.", task_id=spawned["taskId"]
    )


class TaskIdInput(ToolModel):
    task_id: str = Field(alias="taskId", min_length=1, description="From <running-tasks>")


async def cancel_background_task(
    ctx: ToolContext[OrchestrationTools], args: TaskIdInput
) -> ResultOutput:
    cancelled = await ctx.services.background.cancel_anywhere(ctx.thread_id, args.task_id)
    if not cancelled:
        return ResultOutput(result=f"No running background task {args.task_id}.")
    return ResultOutput(result=f"Background task {args.task_id} cancelled.")


class CorrectInput(ToolModel):
    task_id: str = Field(alias="taskId", min_length=1)
    correction: str = Field(min_length=1)


async def correct_background_task(
    ctx: ToolContext[OrchestrationTools], args: CorrectInput
) -> ResultOutput:
    outcome = await ctx.services.background.correct_anywhere(
        ctx.thread_id, args.task_id, args.correction
    )
    return ResultOutput(result=outcome)


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="create-tasks",
        description="Persist a dependency-aware task plan for detached multi-step work. The "
        "plan is shown to the user for approval before anything starts; if they deny it, do "
        "not resubmit in the same turn. Clear single-workflow builds do not need a plan: "
        "write the source file and call build-workflow directly.",
        group=GROUP,
        services=OrchestrationTools,
        input_model=CreateTasksInput,
        output_model=CreateTasksOutput,
        handler=create_tasks,
        asks_user=True,
    ),
    ToolSpec(
        name="complete-checkpoint",
        description="Report the outcome of a planned checkpoint task you just executed: call it "
        'exactly once per <planned-task-follow-up type="checkpoint"> block, with status '
        "succeeded or failed and the evidence. Only a running checkpoint task can be "
        "completed; any other taskId is an error and changes nothing.",
        group=GROUP,
        services=OrchestrationTools,
        input_model=CompleteCheckpointInput,
        output_model=CompleteCheckpointOutput,
        handler=complete_checkpoint,
    ),
    ToolSpec(
        name="update-tasks",
        description="Show or update a visible checklist of the work in this turn.",
        group=GROUP,
        services=OrchestrationTools,
        input_model=UpdateTasksInput,
        output_model=ResultOutput,
        handler=update_tasks,
    ),
    ToolSpec(
        name="ask-user",
        description="Ask the user one or more questions (single choice, multiple choice or "
        "free text) and wait for the answers. Use it when a decision is theirs to make.",
        group=GROUP,
        services=OrchestrationTools,
        input_model=AskUserInput,
        output_model=AskUserOutput,
        handler=ask_user,
        asks_user=True,
    ),
    ToolSpec(
        name="delegate",
        description="Start a background agent on a self-contained task; it reports back when "
        "done. At most a few run at once per thread.",
        group=GROUP,
        services=OrchestrationTools,
        input_model=DelegateInput,
        output_model=DelegateOutput,
        handler=delegate,
    ),
    ToolSpec(
        name="cancel-background-task",
        description="Cancel a running background task by its id.",
        group=GROUP,
        services=OrchestrationTools,
        input_model=TaskIdInput,
        output_model=ResultOutput,
        handler=cancel_background_task,
    ),
    ToolSpec(
        name="correct-background-task",
        description="Send a course correction to a running background task. Returns queued, "
        "task-completed or task-not-found.",
        group=GROUP,
        services=OrchestrationTools,
        input_model=CorrectInput,
        output_model=ResultOutput,
        handler=correct_background_task,
    ),
]
