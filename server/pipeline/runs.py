"""Running a saved workflow in its thread's sandbox: the trigger's item shaped per trigger type,
the fixtures its source declared pinned (as n8n pins a workflow's pinned data in a manual run),
the run recorded as an execution from start to end, and runs in progress stoppable."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from sandbox.toolchain_results import ResolvedParameters, RunReport
from server.catalog import CatalogService
from server.core.caller import LOCAL, Caller
from server.core.ids import new_id
from server.errors import InvalidArgumentError, NotFoundError, UnavailableError
from server.instance import Credentials, CredentialSecrets, Executions, Workflows
from server.instance.types import Execution, Workflow
from server.pipeline.build import WorkflowBuilder
from server.pipeline.trigger_input import shape_trigger_input

__all__ = ["DEFAULT_TIMEOUT_S", "RunRequest", "WorkflowRunner", "masked", "named_trigger"]

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT_S = 300.0


# The trigger in front of a node run on its own (execute_node): it emits the given items.
INPUT_NODE = "Input items"


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    thread_id: str
    workflow_id: str
    input_data: Any = None
    trigger_node_name: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    # Extra pins (verification fixtures), over the declared ones.
    pin_data: dict[str, list[Any]] | None = None
    is_verification: bool = False
    # Already loaded by the caller (verification): not read again.
    workflow: Workflow | None = None
    declared: dict[str, list[Any]] | None = None
    # A verification run's simulated nodes (plan entries), kept with the execution as
    # `simulation` so whoever reads the run knows which outputs were fixtures.
    simulated: list[dict[str, Any]] | None = None
    caller: Caller = LOCAL


class WorkflowRunner:
    def __init__(
        self,
        *,
        builder: WorkflowBuilder,
        catalog: CatalogService,
        workflows: Workflows,
        executions: Executions,
        credentials: Credentials | None = None,
        secrets: CredentialSecrets | None = None,
    ) -> None:
        self._builder = builder
        self._catalog = catalog
        self._workflows = workflows
        self._executions = executions
        self._credentials = credentials
        self._secrets = secrets
        self._running: dict[str, str] = {}  # execution id -> thread id

    async def run(self, request: RunRequest) -> Execution:
        workflow = request.workflow or await self._workflows.require(
            request.workflow_id, request.caller
        )
        toolchain = await self._builder.toolchain(request.thread_id)
        declared = request.declared
        if declared is None:
            declared, _plan = await self._workflows.verification_inputs(workflow.current_version_id)
        trigger = await self._trigger(workflow.nodes, request.trigger_node_name)
        pins: dict[str, list[Any]] = {**declared, **(request.pin_data or {})}
        mode = "manual"
        if trigger is not None and (request.input_data is not None or trigger["name"] not in pins):
            shaped = shape_trigger_input(
                str(trigger["type"]), request.input_data, now=datetime.now(UTC)
            )
            pins[trigger["name"]] = [shaped.item]
            mode = shaped.mode
        execution = await self._executions.start(
            workflow_id=workflow.id,
            version_id=workflow.current_version_id,
            thread_id=request.thread_id,
            mode=mode,
            trigger_node=trigger["name"] if trigger else None,
            is_verification=request.is_verification,
        )
        self._running[execution.id] = request.thread_id
        # The credentials the nodes reference (a verification run pins the nodes whose
        # credentials were mocked, so only real ones are ever used).
        secrets = await self._credentials_for(workflow.nodes, request.caller)
        try:
            outcome = await toolchain.execute(
                workflow.as_json(),
                execution_id=execution.id,
                pin_data=pins,
                start_node=trigger["name"] if trigger else None,
                timeout_s=request.timeout_s,
                credentials=secrets,
            )
        except asyncio.CancelledError:
            # The caller went away: stop the run too, and record how it ended.
            with contextlib.suppress(Exception):
                await toolchain.cancel_execution(execution.id)
            await self._executions.finish(
                execution.id, status="canceled", result={}, error="the caller cancelled the run"
            )
            raise
        except Exception as exc:
            await self._executions.finish(
                execution.id, status="error", result={}, error=f"the run failed: {exc}"
            )
            raise
        finally:
            self._running.pop(execution.id, None)
        return await self._record(execution.id, outcome, secrets, request)

    async def execute_node(
        self,
        thread_id: str,
        node: dict[str, Any],
        items: list[dict[str, Any]],
        *,
        timeout_s: float,
        caller: Caller,
    ) -> dict[str, Any]:
        """Run one node on `items` in the thread's sandbox, with its credentials and through
        the egress proxy like a live run; nothing is saved. The engine's report, secrets
        masked (`nodes[name]`: status, outputs, error)."""
        toolchain = await self._builder.toolchain(thread_id)
        start = {
            "name": INPUT_NODE,
            "type": "n8n-nodes-base.manualTrigger",
            "typeVersion": 1,
            "position": [0, 0],
            "parameters": {},
        }
        link = {"node": node["name"], "type": "main", "index": 0}
        workflow = {
            "id": "execute-node",
            "name": f"execute {node['name']}",
            "nodes": [start, {**node, "position": [200, 0]}],
            "connections": {INPUT_NODE: {"main": [[link]]}},
            "settings": {},
        }
        secrets = await self._credentials_for([node], caller)
        outcome = await toolchain.execute(
            workflow,
            execution_id=new_id("node"),
            pin_data={INPUT_NODE: items or [{}]},
            start_node=INPUT_NODE,
            timeout_s=timeout_s,
            credentials=secrets,
        )
        return masked(outcome.raw(), secrets)

    async def resolve_parameters(
        self,
        thread_id: str,
        execution: Execution,
        node_name: str,
        *,
        item_index: int = 0,
        run_index: int | None = None,
    ) -> ResolvedParameters:
        """The node's parameters with every expression evaluated by the engine, in the thread's
        sandbox, against what `execution` recorded (the workflow version it ran, each node's
        last run). Nothing runs: the nodes' outputs are the run's."""
        workflow = await self._workflows.version_json(execution.version_id, execution.workflow_id)
        if not any(n.get("name") == node_name for n in workflow.get("nodes") or []):
            names = ", ".join(str(n.get("name")) for n in workflow.get("nodes") or []) or "none"
            raise NotFoundError(
                f"node {node_name!r} is not in the workflow execution {execution.id} ran; its "
                f"nodes: {names}"
            )
        recorded = execution.nodes
        # A record keeps each node's last run only: that is the one there is to replay.
        last = int((recorded.get(node_name) or {}).get("runs") or 1) - 1
        if run_index is not None and run_index != last:
            raise InvalidArgumentError(
                f"execution {execution.id} keeps only the last run of {node_name!r}: give "
                f"runIndex {last}, or leave it out"
            )
        toolchain = await self._builder.toolchain(thread_id)
        found = await toolchain.resolve_parameters(
            workflow,
            nodes=recorded,
            node_name=node_name,
            execution_id=execution.id,
            mode=execution.mode,
            run_index=run_index,
            item_index=item_index,
        )
        if not found.ok:
            raise UnavailableError(
                f"resolving the parameters of {node_name!r} failed: {found.message}"
            )
        return found

    async def _credentials_for(
        self, nodes: list[dict[str, Any]], caller: Caller
    ) -> dict[str, dict[str, Any]]:
        """The decrypted credentials the nodes reference, by id (only those the caller may
        see; others stay missing and their nodes fail saying so)."""
        if self._credentials is None or self._secrets is None:
            return {}
        found: dict[str, dict[str, Any]] = {}
        for node in nodes:
            for ref in (node.get("credentials") or {}).values():
                credential_id = ref.get("id") if isinstance(ref, dict) else None
                if not credential_id or credential_id in found:
                    continue
                try:
                    info = await self._credentials.get(str(credential_id))
                except NotFoundError:
                    continue
                if caller.sees(info.project_id):
                    data = await self._secrets.reveal(info.id)
                    found[info.id] = {"type": info.type, "data": data}
        return found

    async def _record(
        self,
        execution_id: str,
        outcome: RunReport,
        secrets: dict[str, dict[str, Any]],
        request: RunRequest,
    ) -> Execution:
        """The run's record, finished as the engine reported it (credential values masked)."""
        report = masked(outcome.raw(), secrets)
        if not outcome.ok:
            message = (
                f"the run did not finish within {request.timeout_s:g} s and was stopped"
                if outcome.stage == "timeout"
                else str(report.get("message") or "the run failed")
            )
            return await self._executions.finish(
                execution_id, status="error", result={}, error=message
            )
        result = {k: v for k, v in report.items() if k not in ("ok", "status", "error")}
        if request.simulated is not None:
            result["simulation"] = {"simulatedNodes": request.simulated}
        failure = report.get("error") or {}
        error = failure.get("message") if isinstance(failure, dict) else None
        return await self._executions.finish(
            execution_id, status=outcome.status or "error", result=result, error=error
        )

    async def stop(self, execution_id: str) -> tuple[bool, str]:
        thread_id = self._running.get(execution_id)
        if thread_id is None:
            execution = await self._executions.require(execution_id)
            return False, f"execution {execution_id} is not running (status {execution.status})"
        toolchain = await self._builder.toolchain(thread_id)
        await toolchain.cancel_execution(execution_id)
        return True, f"execution {execution_id} was asked to stop after its current node"

    async def _trigger(
        self, nodes: list[dict[str, Any]], wanted: str | None
    ) -> dict[str, Any] | None:
        triggers = (await self._catalog.get()).triggers(nodes)
        if wanted is None:
            return triggers[0] if triggers else None
        return named_trigger(triggers, wanted)


def named_trigger(triggers: list[dict[str, Any]], wanted: str) -> dict[str, Any]:
    """The trigger called `wanted`, or InvalidArgumentError listing the ones there are."""
    found = next((n for n in triggers if n.get("name") == wanted), None)
    if found is None:
        names = ", ".join(str(n.get("name")) for n in triggers) or "none"
        raise InvalidArgumentError(
            f"{wanted!r} is not a trigger of this workflow; its triggers: {names}"
        )
    return found


def masked(outcome: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's report with every credential value (4+ characters) replaced by ***: node
    errors may quote a URL or a header."""
    values = {str(v) for c in secrets.values() for v in c["data"].values() if len(str(v)) >= 4}
    if not values:
        return outcome
    text = json.dumps(outcome)
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(json.dumps(value)[1:-1], "***")
    return dict(json.loads(text))
