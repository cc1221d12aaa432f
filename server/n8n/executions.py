"""Executions on both sides: the runs this service makes in its sandboxes (verification and
`run-workflow`, kept in its database) and the instance's own (a published workflow's webhook
runs, kept by n8n), each marked with where it ran."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from server.errors import NotFoundError
from server.instance.types import Execution
from server.n8n.client import N8nClient
from server.n8n.workflows import parse_time
from server.records.sandbox_runs import ExecutionStore

__all__ = ["N8nExecutions"]

# Ids the service gives its own runs (`server/core/ids.py`); n8n's are numbers.
_SANDBOX_PREFIX = "exe_"
# n8n's states that the tools do not know, as the nearest they do.
_STATUS = {"crashed": "error", "new": "running", "unknown": "error"}
ITEMS_KEPT = 100


class N8nExecutions:
    def __init__(self, sandboxed: ExecutionStore, client: N8nClient) -> None:
        self.sandboxed = sandboxed
        self.client = client

    async def start(
        self,
        *,
        workflow_id: str,
        version_id: str,
        thread_id: str,
        mode: str,
        trigger_node: str | None,
        is_verification: bool = False,
    ) -> Execution:
        return await self.sandboxed.start(
            workflow_id=workflow_id,
            version_id=version_id,
            thread_id=thread_id,
            mode=mode,
            trigger_node=trigger_node,
            is_verification=is_verification,
        )

    async def finish(
        self, execution_id: str, *, status: str, result: dict[str, Any], error: str | None
    ) -> Execution:
        return await self.sandboxed.finish(execution_id, status=status, result=result, error=error)

    async def require(self, execution_id: str) -> Execution:
        if execution_id.startswith(_SANDBOX_PREFIX):
            return await self.sandboxed.require(execution_id)
        try:
            found = await self.client.get(f"/executions/{execution_id}", includeData=True)
        except NotFoundError:
            raise NotFoundError(
                f"there is no execution {execution_id!r}; list-executions names them"
            ) from None
        return _execution(found)

    async def listing(
        self, *, workflow_id: str | None = None, status: str | None = None, limit: int = 20
    ) -> list[Execution]:
        ours = await self.sandboxed.listing(workflow_id=workflow_id, status=status, limit=limit)
        theirs = await self.client.pages(
            "/executions", limit=limit, workflowId=workflow_id, status=status
        )
        both = ours + [_execution(found) for found in theirs]
        both.sort(key=lambda e: e.started_at, reverse=True)
        return both[:limit]

    async def delete_test_runs(self, workflow_id: str, *, older_than: datetime) -> int:
        return await self.sandboxed.delete_test_runs(workflow_id, older_than=older_than)

    async def stop_in_instance(self, execution_id: str) -> tuple[bool, str]:
        execution = await self.require(execution_id)
        if execution.finished_at is not None:
            return False, f"execution {execution_id} already finished ({execution.status})"
        await self.client.post(f"/executions/{execution_id}/stop")
        return True, f"execution {execution_id} stopped in n8n"


def _execution(found: dict[str, Any]) -> Execution:
    """An n8n execution in the service's terms: per node its status, outputs (items cut to
    100, with counts) and error, in the order the nodes ran."""
    result_data = (found.get("data") or {}).get("resultData") or {}
    run_data: dict[str, list[dict[str, Any]]] = result_data.get("runData") or {}
    nodes: dict[str, Any] = {}
    for name, runs in run_data.items():
        last = runs[-1] if runs else {}
        slots = (last.get("data") or {}).get("main") or []
        node: dict[str, Any] = {
            "status": last.get("executionStatus") or ("error" if last.get("error") else "success"),
            "runs": len(runs),
            "outputs": [
                {
                    "items": [item.get("json") for item in (slot or [])[:ITEMS_KEPT]],
                    "count": len(slot or []),
                }
                for slot in slots
            ],
        }
        if last.get("error"):
            node["error"] = {"message": str(last["error"].get("message") or "failed")}
        nodes[name] = node
    order = sorted(run_data, key=lambda n: (run_data[n] or [{}])[0].get("executionIndex", 0))
    error = result_data.get("error")
    stopped = found.get("stoppedAt")
    status = str(found.get("status") or "unknown")
    trigger = (((found.get("data") or {}).get("executionData") or {}).get("runtimeData") or {}).get(
        "triggerNode"
    ) or {}
    return Execution(
        id=str(found["id"]),
        workflow_id=str(found.get("workflowId") or ""),
        version_id=str(found.get("workflowVersionId") or ""),
        thread_id="",
        mode=str(found.get("mode") or "trigger"),
        status=_STATUS.get(status, status),
        is_verification=False,
        trigger_node=trigger.get("name"),
        started_at=parse_time(found.get("startedAt") or found.get("createdAt")),
        finished_at=parse_time(stopped) if stopped else None,
        result={"order": order, "nodes": nodes},
        error=str(error.get("message")) if isinstance(error, dict) else None,
        ran_in="instance",
    )
