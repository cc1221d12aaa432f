"""The workflow loop state machine: transitions, budgets, repeated failures, stale runs."""

from __future__ import annotations

import pytest

from server.errors import FailedPreconditionError
from server.pipeline.work_item_machine import (
    KEPT_ROUTINE_ATTEMPTS,
    MAX_VERIFY_ATTEMPTS,
    BuildReport,
    LoopState,
    Remediation,
    VerdictReport,
    new_work_item_id,
    on_build,
    on_verdict,
    start_verification,
)

FIXABLE = Remediation(category="code_fixable", should_edit=True, guidance="fix it")


def fresh() -> LoopState:
    return LoopState(
        work_item_id=new_work_item_id(), thread_id="t1", run_id="r1", source_file_path="src/a.ts"
    )


def saved(state: LoopState) -> LoopState:
    state, action = on_build(state, BuildReport(submitted=True, run_id="r1", workflow_id="w1"))
    assert action.kind == "verify" and action.workflow_id == "w1"
    assert state.phase == "verifying"
    return state


def test_work_item_ids_have_the_reference_shape() -> None:
    item = new_work_item_id()
    assert item.startswith("wi_") and len(item) == 11


def test_three_failed_builds_before_a_save_block_the_item() -> None:
    state = fresh()
    for expected in ("continue_building", "continue_building", "blocked"):
        state, action = on_build(
            state, BuildReport(submitted=False, run_id="r1", remediation=FIXABLE)
        )
        assert action.kind == expected
    assert state.status == "blocked" and state.pre_save_submit_failures == 3
    assert state.last_remediation is not None
    assert state.last_remediation.reason == "pre_save_submit_budget_exhausted"
    assert not state.last_remediation.should_edit


def test_a_save_resets_the_pre_save_count_and_trigger_only_is_done() -> None:
    state, _ = on_build(fresh(), BuildReport(submitted=False, run_id="r1", remediation=FIXABLE))
    state = saved(state)
    assert state.pre_save_submit_failures == 0 and state.successful_submit_seen
    done, action = on_build(fresh(), BuildReport(submitted=True, run_id="r1", trigger_only=True))
    assert (done.status, action.kind) == ("completed", "done")


def test_a_terminal_build_remediation_or_user_input_blocks() -> None:
    terminal = Remediation(category="needs_setup", should_edit=False, guidance="connect Slack")
    state, action = on_build(
        fresh(), BuildReport(submitted=False, run_id="r1", remediation=terminal)
    )
    assert (state.status, action.kind, action.reason) == ("blocked", "blocked", "connect Slack")
    state, action = on_build(
        fresh(), BuildReport(submitted=False, run_id="r1", needs_user_input=True)
    )
    assert action.kind == "blocked" and action.reason == "Builder failed to submit workflow"


def test_a_stale_run_changes_nothing() -> None:
    state = fresh()
    same, action = on_build(state, BuildReport(submitted=True, run_id="other", workflow_id="w"))
    assert action.kind == "ignored" and same == state
    verifying = saved(state)
    again, action = on_verdict(verifying, VerdictReport(verdict="verified", run_id="other"))
    assert action.kind == "ignored" and again == verifying


def test_verdicts_map_to_actions() -> None:
    verifying = saved(fresh())
    done, action = on_verdict(verifying, VerdictReport(verdict="verified"))
    assert (done.phase, done.status, action.kind) == ("done", "completed", "done")
    # Settled items short-circuit.
    still, action = on_verdict(done, VerdictReport(verdict="needs_patch"))
    assert still == done and action.kind == "done"
    blocked, action = on_verdict(verifying, VerdictReport(verdict="needs_user_input"))
    assert (blocked.status, action.kind) == ("blocked", "blocked")
    terminal, action = on_verdict(
        verifying, VerdictReport(verdict="failed_terminal", failure_signature="sig-x")
    )
    assert terminal.last_failure_signature == "sig-x" and action.kind == "blocked"
    # A supplied remediation that says stop editing wins over any verdict.
    stop = Remediation(category="needs_setup", should_edit=False, guidance="connect Gmail")
    forced, action = on_verdict(
        verifying,
        VerdictReport(verdict="needs_patch", remediation=stop, failed_node_name="Send", patch="x"),
    )
    assert action.kind == "blocked" and action.reason == "connect Gmail"
    assert forced.status == "blocked"


def test_a_repair_names_the_node_and_the_same_signature_twice_is_terminal() -> None:
    verifying = saved(fresh())
    repairing, action = on_verdict(
        verifying,
        VerdictReport(
            verdict="needs_patch",
            failure_signature="Code:TypeError",
            failed_node_name="Total",
            diagnosis="amount is undefined",
            execution_id="e1",
        ),
    )
    assert (action.kind, action.failed_node_name, action.diagnosis) == (
        "patch",
        "Total",
        "amount is undefined",
    )
    assert repairing.phase == "repairing" and repairing.rebuild_attempts == 1
    assert repairing.last_remediation is not None
    assert repairing.last_remediation.category == "code_fixable"
    # The repair is submitted and verified again; the same failure comes back.
    repaired = saved(repairing)
    assert repaired.post_submit_remediation_submits_used == 1
    blocked, action = on_verdict(
        repaired, VerdictReport(verdict="needs_rebuild", failure_signature="Code:TypeError")
    )
    assert action.kind == "blocked" and action.reason == "Repeated repair failure: Code:TypeError"
    assert blocked.last_remediation is not None
    assert blocked.last_remediation.reason == "duplicate_failure_signature"


def test_rebuild_details_and_the_post_submit_budget() -> None:
    state = saved(fresh())
    for n in range(2):
        state, action = on_verdict(
            state,
            VerdictReport(
                verdict="needs_rebuild",
                failure_signature=f"sig-{n}",
                failed_node_name="Fetch",
                diagnosis="wrong URL",
            ),
        )
        assert action.kind == "rebuild"
        assert action.failure_details == f"wrong URL. Failed node: Fetch. Signature: sig-{n}"
        state = saved(state)
    # Two repairs were submitted: a third failure (new signature) is out of budget.
    blocked, action = on_verdict(
        state, VerdictReport(verdict="needs_rebuild", failure_signature="sig-9")
    )
    assert action.kind == "blocked" and action.reason == "post_submit_budget_exhausted"
    assert blocked.status == "blocked"
    # A failed repair submit after the budget is used up blocks as well.
    failed, action = on_build(state, BuildReport(submitted=False, run_id="r1", remediation=FIXABLE))
    assert action.kind == "blocked"
    assert failed.last_remediation is not None
    assert failed.last_remediation.reason == "post_submit_budget_exhausted"


def test_the_verification_budget_and_a_round_trip_through_json() -> None:
    state = saved(fresh())
    for _ in range(MAX_VERIFY_ATTEMPTS):
        state = start_verification(state)
    with pytest.raises(FailedPreconditionError, match="attempt limit"):
        start_verification(state)
    assert LoopState.from_json(state.as_json()) == state


def test_the_history_keeps_repairs_and_the_latest_routine_attempts() -> None:
    state, _ = on_verdict(
        saved(fresh()), VerdictReport(verdict="needs_patch", failure_signature="Code:TypeError")
    )
    for _ in range(3 * KEPT_ROUTINE_ATTEMPTS):
        state = saved(state)
    total = 3 * KEPT_ROUTINE_ATTEMPTS + 2  # the first build, the repair, the rebuilds
    assert [a.attempt for a in state.attempts][-1] == total
    repairs = [a for a in state.attempts if a.action == "patch"]
    assert [(a.attempt, a.failure_signature) for a in repairs] == [(2, "Code:TypeError")]
    assert len(state.attempts) == KEPT_ROUTINE_ATTEMPTS + 1
    assert [a.attempt for a in state.attempts][1:] == list(
        range(total - KEPT_ROUTINE_ATTEMPTS + 1, total + 1)
    )
    # The repair is still seen: the same failure again is terminal.
    blocked, action = on_verdict(
        state, VerdictReport(verdict="needs_rebuild", failure_signature="Code:TypeError")
    )
    assert action.reason == "Repeated repair failure: Code:TypeError"
    assert blocked.status == "blocked"
    assert LoopState.from_json(state.as_json()) == state
