"""The workflow loop, persisted: work items are loaded, moved by the pure state machine in
work_item_machine.py, and saved, with the latest build outcome and verification record
beside them."""

from __future__ import annotations

from typing import Any

from server.domain.work_items import WorkItem, WorkItemStore
from server.errors import InvalidArgumentError
from server.pipeline.build import BuildOutcome, BuildRequest
from server.pipeline.work_item_machine import (
    Action,
    BuildReport,
    LoopState,
    VerdictReport,
    new_work_item_id,
    on_build,
    on_verdict,
    start_verification,
)

__all__ = ["WorkLoop", "failure_signature"]


def _state(item: WorkItem) -> LoopState:
    return LoopState.from_json(item.state)


def _item(state: LoopState, outcome: dict[str, Any]) -> WorkItem:
    return WorkItem(
        id=state.work_item_id,
        thread_id=state.thread_id,
        workflow_id=state.workflow_id,
        source_file_path=state.source_file_path,
        state=state.as_json(),
        outcome=outcome,
    )


def failure_signature(outcome: BuildOutcome) -> str | None:
    if not outcome.errors:
        return None
    first = outcome.errors[0]
    return f"build:{first.source}:{first.code or first.message[:80]}"


class WorkLoop:
    def __init__(self, items: WorkItemStore) -> None:
        self.items = items

    async def load(
        self, thread_id: str, work_item_id: str, *, workflow_id: str | None = None
    ) -> tuple[WorkItem, LoopState]:
        """The work item and its loop state; with `workflow_id`, refused unless the item
        builds that workflow."""
        item = await self.items.require(work_item_id, thread_id=thread_id)
        if workflow_id is not None and item.workflow_id and item.workflow_id != workflow_id:
            raise InvalidArgumentError(
                f"work item {work_item_id} builds workflow {item.workflow_id}, not {workflow_id}"
            )
        return item, _state(item)

    async def after_build(
        self,
        request: BuildRequest,
        outcome: BuildOutcome,
        item: tuple[LoopState, dict[str, Any]] | None = None,
    ) -> BuildOutcome:
        """Move the file's work item by this build; the outcome gets the work item id and the
        loop's remediation (budgets stamped, or blocked when they are used up)."""
        state, previous = item or await self.item_for_build(request)
        state, _action = on_build(
            state,
            BuildReport(
                submitted=outcome.success,
                workflow_id=outcome.workflow_id,
                remediation=outcome.remediation,
                failure_signature=failure_signature(outcome),
                trigger_only=outcome.success and outcome.trigger_only,
            ),
        )
        record = dict(previous)
        if outcome.success:
            # A new version: whatever was verified before was another version.
            record = {
                "workflowId": outcome.workflow_id,
                "versionId": outcome.version_id,
                "filePath": outcome.file_path,
                "submitted": True,
                "sourceHash": outcome.source_hash,
                "triggerOnly": outcome.trigger_only,
            }
        else:
            record["lastBuildFailed"] = True
        await self.items.save(_item(state, record))
        outcome.work_item_id = state.work_item_id
        if not outcome.success:
            outcome.remediation = state.last_remediation or outcome.remediation
        return outcome

    async def item_for_build(self, request: BuildRequest) -> tuple[LoopState, dict[str, Any]]:
        """The work item a build of this file moves: the one named, the file's unsettled one,
        or a new one."""
        if request.work_item_id:
            item, state = await self.load(request.thread_id, request.work_item_id)
            return state, item.outcome
        found = await self.items.for_file(request.thread_id, request.file_path)
        if found is not None and not _state(found).terminal:
            return _state(found), found.outcome
        state = LoopState(
            work_item_id=new_work_item_id(),
            thread_id=request.thread_id,
            source_file_path=request.file_path,
            workflow_id=request.workflow_id,
        )
        return state, {}

    async def verification_started(self, thread_id: str, work_item_id: str) -> None:
        """Count the attempt (refused past the budget) and mark the verification running: the
        obligation stays open meanwhile."""
        item, state = await self.load(thread_id, work_item_id)
        state = start_verification(state)
        outcome = {
            **item.outcome,
            "verification": {"attempted": False, "success": False, "status": "running"},
        }
        await self.items.save(_item(state, outcome))

    async def verification_finished(
        self, thread_id: str, work_item_id: str, record: dict[str, Any]
    ) -> None:
        item, state = await self.load(thread_id, work_item_id)
        await self.items.save(_item(state, {**item.outcome, "verification": record}))

    async def report_verdict(
        self, thread_id: str, work_item_id: str, workflow_id: str, report: VerdictReport
    ) -> tuple[LoopState, Action, dict[str, Any]]:
        item, state = await self.load(thread_id, work_item_id, workflow_id=workflow_id)
        state, action = on_verdict(state, report)
        if action.kind != "ignored":
            await self.items.save(_item(state, item.outcome))
        return state, action, item.outcome

    async def latest_for_workflow(
        self, thread_id: str, workflow_id: str
    ) -> tuple[WorkItem, LoopState] | None:
        item = await self.items.latest_for_workflow(thread_id, workflow_id)
        return (item, _state(item)) if item is not None else None
