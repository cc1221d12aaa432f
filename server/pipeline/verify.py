"""Verification: run the saved workflow in the sandbox with its side effects simulated, and
say what the run proves.

Nodes the build's simulation plan marks `simulate` are pinned with fixtures (declared by the
source, else derived from the node's shipped output schema; overrides only for simulated
nodes). Each trigger gets a pass with its input shaped for its type; coverage is the union of
the passes. The claim, the failure class and the remediation come from the evidence, never from
what a model says about the run. The record is kept on the work item, where the verdict report
reads it back.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from server.catalog import CatalogService
from server.core.caller import LOCAL, Caller
from server.domain.work_items import WorkItem
from server.instance import Workflows
from server.instance.types import Execution, Workflow
from server.pipeline.build import WorkflowBuilder
from server.pipeline.claim import claim_from_evidence, classify_failure
from server.pipeline.fixtures import simulation_fixtures
from server.pipeline.runs import RunRequest, WorkflowRunner, named_trigger
from server.pipeline.simulation import main_flow_nodes
from server.pipeline.work import WorkLoop
from server.pipeline.work_item_machine import LoopState, Remediation

__all__ = ["MAX_DATA_CHARS", "MAX_PREVIEW_CHARS", "Verifier", "VerifyRequest"]

MAX_PREVIEW_CHARS = 600
# n8n's caps on the execution data a result carries (`includeData`): a node's items as far as
# they fit in MAX_NODE_DATA_CHARS, the whole in MAX_DATA_CHARS (else each node's first item).
MAX_NODE_DATA_CHARS = 5_000
MAX_DATA_CHARS = 20_000
MAX_FIRST_ITEM_CHARS = 1_000


@dataclass(frozen=True, kw_only=True)
class VerifyRequest:
    thread_id: str
    workflow_id: str
    work_item_id: str | None = None
    input_data: Any = None
    trigger_node_name: str | None = None
    timeout_s: float = 300.0
    fixture_overrides: dict[str, list[Any]] | None = None
    # The simulated nodes whose override may be empty (zero items stop what follows).
    allow_zero_item_fixtures: tuple[str, ...] = ()
    # The nodes this change is about (the one reported failing, the one just repaired): the
    # claim is `unproven` unless each ran for real.
    fix_target_node_names: tuple[str, ...] = ()
    # The result carries each node's output (`data`), and previews of this many characters.
    include_data: bool = False
    max_data_chars: int = MAX_PREVIEW_CHARS
    caller: Caller = LOCAL


class Verifier:
    def __init__(
        self,
        *,
        builder: WorkflowBuilder,
        catalog: CatalogService,
        workflows: Workflows,
        runner: WorkflowRunner,
        loop: WorkLoop,
    ) -> None:
        self._builder = builder
        self._catalog = catalog
        self._workflows = workflows
        self._runner = runner
        self._loop = loop

    async def verify(self, request: VerifyRequest) -> dict[str, Any]:
        workflow = await self._workflows.require(request.workflow_id, request.caller)
        found: tuple[WorkItem, LoopState] | None
        if request.work_item_id:
            found = await self._loop.load(request.thread_id, request.work_item_id)
        else:
            found = await self._loop.latest_for_workflow(request.thread_id, workflow.id)
        work_item_id = found[0].id if found is not None else None
        state = found[1] if found is not None else None
        # The nodes named, and the one the last repair targeted, must be exercised for real to
        # count as proven.
        fix_targets = list(request.fix_target_node_names)
        if state and state.last_failed_node_name:
            fix_targets.append(state.last_failed_node_name)
        declared, plan = await self._workflows.verification_inputs(workflow.current_version_id)
        simulated = [e["nodeName"] for e in plan or [] if e["verdict"] == "simulate"]
        refusal = _check_overrides(request, simulated)
        if refusal is not None:
            return {"workItemId": work_item_id, "success": False, **refusal}
        triggers = await self._triggers(workflow, request.trigger_node_name)
        if work_item_id:
            await self._loop.verification_started(request.thread_id, work_item_id)
        try:
            # Output the model wrote at build counts like declared output (declared wins).
            written = {e["nodeName"]: e["fixture"] for e in plan or [] if e.get("fixture")}
            fixtures = await self._fixtures(request, workflow, simulated, written | declared)
            runs = [
                await self._runner.run(
                    RunRequest(
                        thread_id=request.thread_id,
                        workflow_id=workflow.id,
                        input_data=request.input_data,
                        trigger_node_name=trigger,
                        timeout_s=request.timeout_s,
                        pin_data=fixtures,
                        is_verification=True,
                        workflow=workflow,
                        declared=declared,
                        simulated=[e for e in plan or [] if e["verdict"] == "simulate"],
                    )
                )
                for trigger in triggers
            ]
        except BaseException as exc:
            # The record must not stay `running`: it would hold the obligation open forever.
            if work_item_id:
                failed = {"attempted": True, "success": False, "status": "error", "error": str(exc)}
                await asyncio.shield(
                    self._loop.verification_finished(request.thread_id, work_item_id, failed)
                )
            raise
        result = self._result(workflow, plan, simulated, runs, work_item_id, fix_targets, request)
        if work_item_id:
            await self._loop.verification_finished(
                request.thread_id, work_item_id, _record(result, runs)
            )
        return result

    async def _fixtures(
        self,
        request: VerifyRequest,
        workflow: Workflow,
        simulated: list[str],
        declared: dict[str, list[Any]],
    ) -> dict[str, list[Any]]:
        toolchain = await self._builder.toolchain(request.thread_id)
        nodes = {str(n.get("name")): n for n in workflow.nodes}
        schemas: dict[str, dict[str, Any] | None] = {}
        for name in simulated:
            node = nodes.get(name, {})
            if name in declared or not str(node.get("type", "")).startswith("n8n-nodes-base."):
                continue
            parameters = node.get("parameters") or {}
            schemas[name] = await toolchain.output_schema(
                str(node["type"]),
                float(node.get("typeVersion", 1)),
                resource=parameters.get("resource"),
                operation=parameters.get("operation"),
            )
        fixtures = simulation_fixtures(
            {"nodes": workflow.nodes, "connections": workflow.connections},
            simulated,
            declared=declared,
            schemas=schemas,
        )
        return {**fixtures, **(request.fixture_overrides or {})}

    async def _triggers(self, workflow: Workflow, wanted: str | None) -> list[str | None]:
        """The triggers to verify: the one named, else each in turn (none: one pass)."""
        triggers = (await self._catalog.get()).triggers(workflow.nodes)
        if wanted is not None:
            return [str(named_trigger(triggers, wanted)["name"])]
        return [str(n["name"]) for n in triggers] or [None]

    def _result(
        self,
        workflow: Workflow,
        plan: list[dict[str, Any]] | None,
        simulated: list[str],
        runs: list[Execution],
        work_item_id: str | None,
        fix_targets: list[str],
        request: VerifyRequest,
    ) -> dict[str, Any]:
        ran = {name: node for run in runs for name, node in run.nodes.items()}
        reached = [name for name in ran if ran[name].get("status") != "error"]
        errors = [
            {"nodeName": name, "message": (node.get("error") or {}).get("message", "")}
            for run in runs
            for name, node in run.nodes.items()
            if node.get("error")
        ]
        waiting = any(run.status == "waiting" for run in runs)
        # With a plan, waiting means a user-action node was not simulated: a failure. A
        # plan-less build (made before plans) keeps the old rule: waiting after output is fine.
        failed_runs = [
            run
            for run in runs
            if run.status != "success"
            and not (plan is None and run.status == "waiting" and run.nodes)
        ]
        success = not errors and not failed_runs
        planned = (
            [e["nodeName"] for e in plan]
            if plan is not None
            else sorted(main_flow_nodes({"connections": workflow.connections}))
        )
        simulated_ran = [n for n in simulated if n in ran]
        claim = claim_from_evidence(
            succeeded=success,
            planned_nodes=planned,
            reached=reached,
            simulated=simulated_ran,
            fix_targets=fix_targets,
        )
        last = runs[-1]
        result: dict[str, Any] = {
            "workItemId": work_item_id,
            "executionId": last.id,
            "executionIds": [run.id for run in runs],
            "success": success,
            "status": "error" if failed_runs and not waiting else last.status,
            "nodesExecuted": len(ran),
            "lastNodeExecuted": last.order[-1] if last.order else None,
            "nodePreviews": [
                _preview(name, ran[name], name in simulated, request.max_data_chars) for name in ran
            ],
            "simulatedNodes": simulated_ran,
            "simulationNote": _simulation_note(simulated_ran, plan),
            "nodeErrors": errors,
            "nodesNotReached": claim.nodes_not_reached,
            "claim": claim.as_json(),
        }
        if request.include_data:
            result["data"] = _data(ran)
        if not success:
            result |= _failure(errors, failed_runs, waiting and plan is not None)
        result["guidance"] = _guidance(result)
        return result


def _check_overrides(request: VerifyRequest, simulated: list[str]) -> dict[str, Any] | None:
    for name, items in (request.fixture_overrides or {}).items():
        if name not in simulated:
            return _blocked(
                "invalid_fixture_override",
                f"'{name}' is not simulated in this workflow's plan, so its output cannot be "
                f"overridden; simulated nodes: {', '.join(simulated) or 'none'}",
            )
        if not items and name not in request.allow_zero_item_fixtures:
            return _blocked(
                "zero_item_fixture_override",
                f"the override for '{name}' has no items, which stops everything after it, so "
                "the run would pass while verifying nothing; give at least one item, or list "
                f"'{name}' in allowZeroItemFixtures when the empty branch is what you verify",
            )
    return None


def _blocked(reason: str, guidance: str) -> dict[str, Any]:
    remediation = Remediation(
        category="blocked", should_edit=False, guidance=guidance, reason=reason
    )
    return {
        "status": "not_run",
        "remediation": _remediation_json(remediation),
        "guidance": guidance,
    }


def _remediation_json(remediation: Remediation) -> dict[str, Any]:
    return {
        "category": remediation.category,
        "shouldEdit": remediation.should_edit,
        "guidance": remediation.guidance,
        "reason": remediation.reason,
    }


def _failure(
    errors: list[dict[str, str]], failed_runs: list[Execution], user_action_waiting: bool
) -> dict[str, Any]:
    if user_action_waiting:
        remediation = Remediation(
            category="needs_setup",
            should_edit=False,
            reason="unsimulated_user_action_node",
            guidance="The run stopped at a node that waits for a person; do not edit the code: "
            "what follows it needs a manual test.",
        )
        return {"remediation": _remediation_json(remediation), "failureSignature": "waiting"}
    node = errors[0]["nodeName"] if errors else None
    message = errors[0]["message"] if errors else (failed_runs[0].error or "the run failed")
    found = classify_failure(message)
    where = f"node '{node}'" if node else "the run"
    remediation = Remediation(
        category=found.category,
        should_edit=found.should_edit,
        reason=found.reason,
        guidance=f"{where} failed: {message}"
        + (" Fix that node in the source and build again." if found.should_edit else ""),
    )
    return {
        "remediation": _remediation_json(remediation),
        "failedNodeName": node,
        "failureSignature": _signature(node, message),
        "error": message,
    }


def _signature(node: str | None, message: str) -> str:
    """Stable across runs: digits and quoted values vary, the failure does not."""
    normal = re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "…", message.splitlines()[0]))
    return f"{node or 'run'}:{normal[:120]}"


def _output(node: dict[str, Any]) -> Any:
    """A node's output as n8n shows it: its items, or with several outputs each output's
    items by index and the total."""
    outputs = node.get("outputs") or []
    if len(outputs) <= 1:
        return list(outputs[0].get("items", [])) if outputs else []
    return {
        "outputs": [{"index": i, "items": list(o.get("items", []))} for i, o in enumerate(outputs)],
        "totalItems": sum(int(o.get("count", 0)) for o in outputs),
    }


def _preview(
    name: str, node: dict[str, Any], simulated: bool, max_chars: int = MAX_PREVIEW_CHARS
) -> dict[str, Any]:
    outputs = node.get("outputs") or []
    text = json.dumps(_output(node))
    cut = len(text) > max_chars
    preview: dict[str, Any] = {
        "nodeName": name,
        "itemCount": sum(int(o.get("count", 0)) for o in outputs),
        "preview": f"{text[:max_chars]}..." if cut and max_chars > 0 else text[:max_chars],
        "truncated": cut,
        "chars": len(text),
        "simulated": simulated,
    }
    if len(outputs) > 1:
        preview["outputs"] = [
            {"index": i, "itemCount": int(o.get("count", 0))} for i, o in enumerate(outputs)
        ]
    return preview


def _data(ran: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's output by node (`includeData`; the last pass's, where triggers ran in turn),
    cut as n8n cuts it: a node's items as far as they fit, and everything past
    MAX_DATA_CHARS down to each node's first item."""
    data: dict[str, Any] = {}
    for name, node in ran.items():
        if not any(int(o.get("count", 0)) for o in node.get("outputs") or []):
            continue  # as in n8n: a node that output nothing has no entry
        value = _output(node)
        if isinstance(value, dict):
            value["outputs"] = [o | {"items": _fitted(o["items"])} for o in value["outputs"]]
        else:
            value = _fitted(value)
        data[name] = value
    if len(json.dumps(data)) <= MAX_DATA_CHARS:
        return data
    return {
        name: value | {"outputs": [o | {"items": _collapsed(o["items"])} for o in value["outputs"]]}
        if isinstance(value, dict) and "outputs" in value
        else _collapsed(value)
        for name, value in data.items()
    }


def _fitted(items: list[Any]) -> Any:
    """The items, or as many as fit in MAX_NODE_DATA_CHARS and how many there were."""
    if len(json.dumps(items)) <= MAX_NODE_DATA_CHARS:
        return items
    kept: list[Any] = []
    size = 2
    for item in items:
        size += len(json.dumps(item)) + 1
        if size > MAX_NODE_DATA_CHARS:
            break
        kept.append(item)
    return {
        "items": kept,
        "truncated": True,
        "totalItems": len(items),
        "shownItems": len(kept),
        "message": f"Output truncated: showing {len(kept)} of {len(items)} items. Use "
        "get-node-output for the rest.",
    }


def _collapsed(value: Any) -> Any:
    """A node's items down to how many there are and the first one."""
    items = value.get("items", []) if isinstance(value, dict) else value
    total = value.get("totalItems", len(items)) if isinstance(value, dict) else len(items)
    if not items:
        return value
    first = json.dumps(items[0])
    return {
        "_itemCount": total,
        "_truncated": True,
        "_firstItemPreview": items[0]
        if len(first) <= MAX_FIRST_ITEM_CHARS
        else f"{first[:MAX_FIRST_ITEM_CHARS]}…",
    }


def _simulation_note(simulated: list[str], plan: list[dict[str, Any]] | None) -> str:
    if plan is None:
        return "No simulation plan was made for this build: nothing was simulated."
    if not simulated:
        return "Nothing was simulated: every node that ran, ran for real (in the sandbox)."
    note = (
        f"Simulated with fixtures, not run: {', '.join(simulated)}. Tell the user these were "
        "not exercised for real."
    )
    unjudged = [e for e in plan if e.get("modelError") and e["nodeName"] in simulated]
    if unjudged:
        names = ", ".join(e["nodeName"] for e in unjudged)
        note += (
            f" No rule decides {names} and {unjudged[0]['modelError']}, so the deterministic "
            "plan simulated them to be safe."
        )
    return note


def _guidance(result: dict[str, Any]) -> str:
    level = result["claim"]["level"]
    if result["success"]:
        lead = {
            "verified": "Verified: every planned node ran for real.",
            "partial": "Partly verified: some nodes were simulated or not reached "
            f"({', '.join(result['simulatedNodes'] + result['nodesNotReached'])}); do not call "
            "the workflow verified or ready to publish; offer a live test.",
        }.get(level, "Not proven: the nodes a repair targeted were not exercised.")
        claim_note = "" if level == "verified" else f"; the claim stays {level}"
        return (
            f"{lead} Report it with report-verification-verdict (verdict verified: the run "
            f"passed{claim_note})."
        )
    failed = result.get("failedNodeName")
    if failed:
        return (
            f"Verification failed at '{failed}'. Report it with report-verification-verdict "
            "(verdict needs_patch, failedNodeName and failureSignature as given), then edit the "
            "same source file and build it again."
        )
    return f"Verification did not pass: {result['remediation']['guidance']}"


def _record(result: dict[str, Any], runs: list[Execution]) -> dict[str, Any]:
    return {
        "attempted": True,
        "success": result["success"],
        "executionId": result["executionId"],
        "status": result["status"],
        "failureSignature": result.get("failureSignature"),
        "remediationCategory": (result.get("remediation") or {}).get("category"),
        "claim": result["claim"],
        "evidence": {
            "nodesExecuted": result["nodesExecuted"],
            "triggerNodeName": runs[-1].trigger_node,
            "nodesNotReached": result["nodesNotReached"],
            "nodeErrors": result["nodeErrors"],
        },
        "verifiedAt": datetime.now(UTC).isoformat(),
    }
