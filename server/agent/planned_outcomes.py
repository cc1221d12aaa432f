"""Whether a planned task's run did what its task asked, from evidence, never from the run
merely ending: a build task succeeds only when its run saved a workflow and that workflow's
verification reached the claim the plan asked for (a supporting sub-workflow, or one whose
only triggers a test cannot fire, is done once saved); a checkpoint succeeds or fails only
through `complete-checkpoint`, and a checkpoint run that ends without it fails."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server.errors import NotFoundError
from server.pipeline.work import WorkLoop
from server.runtime.conversation import Message

__all__ = ["CLAIM_RANK", "TaskVerdict", "judge_build_task", "task_run_messages"]

# Claim levels from the strongest; a task asking for `partial` accepts `verified` too.
CLAIM_RANK = {"verified": 3, "partial": 2, "unproven": 1, "failed": 0}
BUILD_TOOL = "build-workflow"


@dataclass(frozen=True, kw_only=True)
class TaskVerdict:
    succeeded: bool
    reason: str  # the error of a failed task; a note on a succeeded one
    outcome: dict[str, Any]


def task_run_messages(messages: list[Message], task_id: str) -> list[Message]:
    """The messages of the run that executed a planned task: from its follow-up message on."""
    marker = f'taskId="{task_id}"'
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        content = message["content"]
        text = (
            content
            if isinstance(content, str)
            else " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
        )
        if message["role"] == "user" and marker in text:
            return messages[index:]
    return []


def _build_results(messages: list[Message]) -> list[dict[str, Any]]:
    """The build-workflow results of these messages, in order."""
    builds: set[str] = set()
    results: list[dict[str, Any]] = []
    for message in messages:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and block.get("name") == BUILD_TOOL:
                builds.add(block["id"])
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in builds:
                try:
                    result = json.loads(block.get("content") or "")
                except (TypeError, json.JSONDecodeError):
                    continue
                if isinstance(result, dict):
                    results.append(result)
    return results


async def judge_build_task(
    task: dict[str, Any], messages: list[Message], loop: WorkLoop, thread_id: str
) -> TaskVerdict:
    saved = [r for r in _build_results(messages) if r.get("success") and r.get("workflowId")]
    if not saved:
        return TaskVerdict(
            succeeded=False,
            reason="Workflow build run ended without saving a workflow",
            outcome={"submitted": False},
        )
    last = saved[-1]
    outcome: dict[str, Any] = {
        "submitted": True,
        "workflowId": last["workflowId"],
        "workItemId": last.get("workItemId"),
    }
    if task.get("isSupportingWorkflow") or last.get("triggerOnly"):
        return TaskVerdict(
            succeeded=True, reason="saved (nothing a test run can prove)", outcome=outcome
        )
    wanted = str(task.get("claim") or "partial")
    verification: dict[str, Any] = {}
    if last.get("workItemId"):
        try:
            item, _state = await loop.load(thread_id, str(last["workItemId"]))
            verification = dict(item.outcome.get("verification") or {})
        except NotFoundError:
            verification = {}
    level = (verification.get("claim") or {}).get("level")
    outcome["verification"] = {"attempted": bool(verification.get("attempted")), "claim": level}
    if not verification.get("attempted"):
        return TaskVerdict(
            succeeded=False,
            reason=f"Workflow {last['workflowId']} was saved but never verified (the plan "
            f"asked for a {wanted} verification)",
            outcome=outcome,
        )
    if not verification.get("success") or CLAIM_RANK.get(level or "failed", 0) < CLAIM_RANK[wanted]:
        failure = verification.get("failureSignature")
        detail = f": {failure}" if failure else ""
        return TaskVerdict(
            succeeded=False,
            reason=f"Workflow {last['workflowId']} was saved but its verification reached "
            f"{level or 'no claim'}, short of the {wanted} the plan asked for{detail}",
            outcome=outcome,
        )
    return TaskVerdict(succeeded=True, reason=f"verified ({level})", outcome=outcome)
