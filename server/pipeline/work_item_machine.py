"""The workflow loop: a deterministic state machine per work item (one workflow being built,
verified and repaired). Pure: it takes a state and an event and returns the next state and the
action to take; persisting the state is the caller's job.

Budgets: 3 failed submits before the first save, 2 repair submits after it, 5 verification
attempts. One automatic repair per failure signature: the same signature twice is terminal.
A result from another run than the work item's (a stale run) changes nothing.

The attempt history keeps every repair (the once-per-signature rule reads them; the budgets
bound them) and the latest `KEPT_ROUTINE_ATTEMPTS` builds and verifications: a file rebuilt a
thousand times in one work item must not make each build carry a thousand attempts.
"""

from __future__ import annotations

import dataclasses
import secrets
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from server.errors import FailedPreconditionError

__all__ = [
    "DEFAULT_REMEDIATION",
    "KEPT_ROUTINE_ATTEMPTS",
    "MAX_POST_SUBMIT_REMEDIATION_SUBMITS",
    "MAX_PRE_SAVE_SUBMIT_FAILURES",
    "MAX_VERIFY_ATTEMPTS",
    "Action",
    "ActionKind",
    "Attempt",
    "BuildReport",
    "LoopState",
    "Phase",
    "Remediation",
    "Status",
    "Verdict",
    "VerdictReport",
    "new_work_item_id",
    "normalise_verdict",
    "on_build",
    "on_verdict",
    "start_verification",
]

MAX_PRE_SAVE_SUBMIT_FAILURES = 3
MAX_POST_SUBMIT_REMEDIATION_SUBMITS = 2
MAX_VERIFY_ATTEMPTS = 5
KEPT_ROUTINE_ATTEMPTS = 20
_REPAIRS = ("patch", "rebuild")

Phase = Literal["building", "verifying", "repairing", "done", "blocked"]
Status = Literal["active", "completed", "blocked"]
Verdict = Literal[
    "verified",
    "needs_patch",
    "needs_rebuild",
    "trigger_only",
    "needs_user_input",
    "failed_terminal",
]
ActionKind = Literal[
    "ignored", "continue_building", "verify", "rebuild", "patch", "done", "blocked"
]


def new_work_item_id() -> str:
    alphabet = string.ascii_letters + string.digits
    return "wi_" + "".join(secrets.choice(alphabet) for _ in range(8))


@dataclass(frozen=True, kw_only=True)
class Remediation:
    category: Literal["code_fixable", "needs_setup", "blocked"]
    should_edit: bool
    guidance: str
    reason: str | None = None
    remaining_submit_fixes: int | None = None


@dataclass(frozen=True, kw_only=True)
class Attempt:
    phase: Phase
    attempt: int
    action: Literal["build", "verify", "rebuild", "patch"]
    result: Literal["success", "failure", "blocked"]
    workflow_id: str | None = None
    execution_id: str | None = None
    failure_signature: str | None = None
    diagnosis: str | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


@dataclass(frozen=True, kw_only=True)
class LoopState:
    work_item_id: str
    thread_id: str
    run_id: str | None = None
    workflow_id: str | None = None
    source_file_path: str | None = None
    phase: Phase = "building"
    status: Status = "active"
    last_execution_id: str | None = None
    last_failure_signature: str | None = None
    last_failed_node_name: str | None = None
    rebuild_attempts: int = 0
    successful_submit_seen: bool = False
    pre_save_submit_failures: int = 0
    post_submit_remediation_submits_used: int = 0
    verify_attempts: int = 0
    last_remediation: Remediation | None = None
    attempts: tuple[Attempt, ...] = ()

    @property
    def terminal(self) -> bool:
        return self.status in ("completed", "blocked")

    def as_json(self) -> dict[str, Any]:
        # Every field is a scalar but these two; `dataclasses.asdict` deep-copies each value.
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.last_remediation is not None:
            values["last_remediation"] = dataclasses.asdict(self.last_remediation)
        values["attempts"] = [vars(a).copy() for a in self.attempts]
        return values

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoopState:
        values = dict(data)
        remediation = values.get("last_remediation")
        values["last_remediation"] = Remediation(**remediation) if remediation else None
        values["attempts"] = tuple(Attempt(**a) for a in values.get("attempts") or ())
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class Action:
    kind: ActionKind
    reason: str | None = None
    workflow_id: str | None = None
    failure_details: str | None = None
    failed_node_name: str | None = None
    diagnosis: str | None = None
    patch: str | None = None
    source_file_path: str | None = None


@dataclass(frozen=True, kw_only=True)
class BuildReport:
    submitted: bool
    run_id: str | None = None
    workflow_id: str | None = None
    needs_user_input: bool = False
    trigger_only: bool = False
    remediation: Remediation | None = None
    failure_signature: str | None = None
    blocking_reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class VerdictReport:
    verdict: Verdict
    run_id: str | None = None
    execution_id: str | None = None
    failure_signature: str | None = None
    failed_node_name: str | None = None
    diagnosis: str | None = None
    patch: str | None = None
    remediation: Remediation | None = None


def _stale(state: LoopState, run_id: str | None) -> bool:
    return bool(state.run_id and run_id and state.run_id != run_id)


def _attempt(state: LoopState, **fields: Any) -> tuple[Attempt, ...]:
    """The history with one more attempt (numbered on from the last), the oldest routine
    attempts dropped past `KEPT_ROUTINE_ATTEMPTS`."""
    number = state.attempts[-1].attempt + 1 if state.attempts else 1
    attempts = (*state.attempts, Attempt(attempt=number, **fields))
    routine = [a for a in attempts if a.action not in _REPAIRS]
    dropped = {id(a) for a in routine[: max(0, len(routine) - KEPT_ROUTINE_ATTEMPTS)]}
    return tuple(a for a in attempts if id(a) not in dropped)


def _blocked(state: LoopState, reason: str, **changes: Any) -> tuple[LoopState, Action]:
    return (
        dataclasses.replace(state, phase="blocked", status="blocked", **changes),
        Action(kind="blocked", reason=reason, workflow_id=state.workflow_id),
    )


def _budget(reason: str, guidance: str) -> Remediation:
    return Remediation(category="blocked", should_edit=False, guidance=guidance, reason=reason)


def on_build(state: LoopState, report: BuildReport) -> tuple[LoopState, Action]:
    """A build of the work item's source finished (saved or not)."""
    if _stale(state, report.run_id):
        return state, Action(kind="ignored", reason="the report is from another run")
    used = state.post_submit_remediation_submits_used
    if state.successful_submit_seen:
        used += 1  # a submit after the first save is a repair
    remediation = report.remediation
    if remediation is not None and state.successful_submit_seen:
        remediation = dataclasses.replace(
            remediation, remaining_submit_fixes=max(0, MAX_POST_SUBMIT_REMEDIATION_SUBMITS - used)
        )
    state = dataclasses.replace(state, post_submit_remediation_submits_used=used)
    if not report.submitted:
        return _on_failed_build(state, report, remediation)
    state = dataclasses.replace(
        state,
        successful_submit_seen=True,
        pre_save_submit_failures=0,
        workflow_id=report.workflow_id or state.workflow_id,
        last_remediation=remediation,
        attempts=_attempt(
            state,
            phase=state.phase,
            action="build",
            result="success",
            workflow_id=report.workflow_id,
        ),
    )
    if report.needs_user_input:
        return _blocked(state, report.blocking_reason or "the workflow needs the user's input")
    if report.trigger_only:
        done = dataclasses.replace(state, phase="done", status="completed")
        return done, Action(
            kind="done", workflow_id=state.workflow_id, reason="trigger-only workflow"
        )
    verifying = dataclasses.replace(state, phase="verifying")
    return verifying, Action(kind="verify", workflow_id=state.workflow_id)


def _on_failed_build(
    state: LoopState, report: BuildReport, remediation: Remediation | None
) -> tuple[LoopState, Action]:
    attempts = _attempt(
        state,
        phase=state.phase,
        action="build",
        result="failure",
        failure_signature=report.failure_signature,
    )
    if not state.successful_submit_seen:
        failures = state.pre_save_submit_failures + 1
        state = dataclasses.replace(state, pre_save_submit_failures=failures, attempts=attempts)
        if failures >= MAX_PRE_SAVE_SUBMIT_FAILURES:
            remediation = _budget(
                "pre_save_submit_budget_exhausted",
                f"The build failed {failures} times before it was ever saved: stop editing and "
                "explain what blocks it.",
            )
    else:
        state = dataclasses.replace(state, attempts=attempts)
        if state.post_submit_remediation_submits_used >= MAX_POST_SUBMIT_REMEDIATION_SUBMITS:
            remediation = _budget(
                "post_submit_budget_exhausted",
                "The repair budget after the first save is used up: stop editing and explain.",
            )
    state = dataclasses.replace(state, last_remediation=remediation)
    terminal = remediation is not None and not remediation.should_edit
    if report.needs_user_input or terminal:
        reason = (
            (remediation.guidance if remediation else None)
            or report.blocking_reason
            or report.failure_signature
            or "Builder failed to submit workflow"
        )
        return _blocked(state, reason)
    return state, Action(
        kind="continue_building",
        reason="BUILD FAILED",
        source_file_path=state.source_file_path,
        workflow_id=state.workflow_id,
    )


def start_verification(state: LoopState) -> LoopState:
    """Count a verification attempt; the one past the budget is refused."""
    if state.verify_attempts >= MAX_VERIFY_ATTEMPTS:
        raise FailedPreconditionError(
            f"attempt limit: work item {state.work_item_id} has been verified "
            f"{state.verify_attempts} times; stop and report what blocks it"
        )
    return dataclasses.replace(state, verify_attempts=state.verify_attempts + 1)


DEFAULT_REMEDIATION: dict[str, Remediation] = {
    "needs_patch": Remediation(
        category="code_fixable", should_edit=True, guidance="Patch the failing node."
    ),
    "needs_rebuild": Remediation(
        category="code_fixable", should_edit=True, guidance="Rebuild the workflow."
    ),
    "needs_user_input": Remediation(
        category="needs_setup", should_edit=False, guidance="Ask the user."
    ),
    "failed_terminal": Remediation(
        category="blocked", should_edit=False, guidance="Explain the failure."
    ),
}


def normalise_verdict(report: VerdictReport) -> VerdictReport:
    """The verdict as the loop takes it: the default remediation for its kind, and a terminal
    remediation forcing needs_user_input (needs setup) or failed_terminal, without a patch."""
    remediation = report.remediation or DEFAULT_REMEDIATION.get(report.verdict)
    if remediation is not None and not remediation.should_edit:
        verdict: Verdict = (
            "needs_user_input" if remediation.category == "needs_setup" else "failed_terminal"
        )
        return dataclasses.replace(
            report, verdict=verdict, remediation=remediation, patch=None, failed_node_name=None
        )
    return dataclasses.replace(report, remediation=remediation)


def on_verdict(state: LoopState, report: VerdictReport) -> tuple[LoopState, Action]:
    """A verification verdict for the work item."""
    if _stale(state, report.run_id):
        return state, Action(kind="ignored", reason="the verdict is from another run")
    if state.terminal:
        kind: ActionKind = "done" if state.status == "completed" else "blocked"
        return state, Action(kind=kind, workflow_id=state.workflow_id, reason="already settled")
    report = normalise_verdict(report)
    state = dataclasses.replace(
        state, last_remediation=report.remediation, last_execution_id=report.execution_id
    )
    remediation = report.remediation
    if report.verdict in ("verified", "trigger_only"):
        done = dataclasses.replace(state, phase="done", status="completed")
        return done, Action(kind="done", workflow_id=state.workflow_id, reason=report.verdict)
    if report.verdict == "needs_user_input":
        return _blocked(state, remediation.guidance if remediation else "needs the user")
    if report.verdict == "failed_terminal":
        return _blocked(
            state,
            report.failure_signature or "the workflow cannot be made to work as things stand",
            last_failure_signature=report.failure_signature,
        )
    return _escalate(state, report)


def _escalate(state: LoopState, report: VerdictReport) -> tuple[LoopState, Action]:
    """needs_patch / needs_rebuild: one automatic repair per failure signature, within budget."""
    action: Literal["patch", "rebuild"] = "patch" if report.verdict == "needs_patch" else "rebuild"
    earlier = {
        a.failure_signature for a in state.attempts if a.action in _REPAIRS and a.failure_signature
    }
    attempts = _attempt(
        state,
        phase="repairing",
        action=action,
        result="failure",
        workflow_id=state.workflow_id,
        execution_id=report.execution_id,
        failure_signature=report.failure_signature,
        diagnosis=report.diagnosis,
    )
    state = dataclasses.replace(state, attempts=attempts)
    if report.failure_signature and report.failure_signature in earlier:
        return _blocked(
            state,
            f"Repeated repair failure: {report.failure_signature}",
            last_remediation=_budget("duplicate_failure_signature", "The same failure came back."),
        )
    if state.post_submit_remediation_submits_used >= MAX_POST_SUBMIT_REMEDIATION_SUBMITS:
        return _blocked(
            state,
            "post_submit_budget_exhausted",
            last_remediation=_budget("post_submit_budget_exhausted", "No repairs left."),
        )
    repairing = dataclasses.replace(
        state,
        phase="repairing",
        rebuild_attempts=state.rebuild_attempts + 1,
        last_failure_signature=report.failure_signature,
        last_failed_node_name=report.failed_node_name,
        last_execution_id=report.execution_id,
    )
    if action == "patch":
        return repairing, Action(
            kind="patch",
            workflow_id=state.workflow_id,
            failed_node_name=report.failed_node_name,
            diagnosis=report.diagnosis,
            patch=report.patch,
        )
    details = ". ".join(
        part
        for part in (
            report.diagnosis,
            f"Failed node: {report.failed_node_name}" if report.failed_node_name else None,
            f"Signature: {report.failure_signature}" if report.failure_signature else None,
        )
        if part
    )
    return repairing, Action(kind="rebuild", workflow_id=state.workflow_id, failure_details=details)
