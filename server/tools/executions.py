"""Execution tools: run a saved workflow in the thread's sandbox, and read what runs did."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from server.catalog import CatalogService
from server.errors import InvalidArgumentError, NotFoundError
from server.instance import Executions, Workflows
from server.instance.types import Execution
from server.pipeline.runs import RunRequest, WorkflowRunner
from server.tools.approval_cards import APPROVAL_SUMMARY
from server.tools.scope import visible_execution
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "ExecutionTools"]

GROUP = "executions"
PREVIEW_ITEMS = 10


@dataclass(frozen=True, kw_only=True)
class ExecutionTools:
    """What the execution tools may touch."""

    workflows: Workflows
    executions: Executions
    runner: WorkflowRunner
    catalog: CatalogService


class RunWorkflowInput(ToolModel):
    workflow_id: str = Field(alias="workflowId", min_length=1)
    input_data: dict[str, Any] | None = Field(
        None, alias="inputData", description="Data for the trigger node, shaped per trigger type"
    )
    trigger_node_name: str | None = Field(
        None, alias="triggerNodeName", description="Which trigger to start from (default: first)"
    )
    timeout: int = Field(
        300_000, ge=1_000, le=600_000, description="Max wait in ms; the run is stopped after it"
    )
    approval_summary: str | None = Field(None, alias="approvalSummary", **APPROVAL_SUMMARY)


class ExecutionOutput(ToolModel):
    execution_id: str = Field(alias="executionId")
    status: str
    data: dict[str, Any] | None = Field(
        None, description=f"Each node's first output, up to {PREVIEW_ITEMS} items"
    )
    error: str | None = None
    started_at: datetime | None = Field(None, alias="startedAt")
    finished_at: datetime | None = Field(None, alias="finishedAt")
    ran_in: Literal["sandbox", "instance"] = Field(
        "sandbox", alias="ranIn", description="sandbox: a test run here; instance: n8n's own"
    )
    is_verification: bool = Field(False, alias="isVerification")
    simulation: dict[str, Any] | None = Field(
        None, description="A verification run's simulated nodes: their outputs are fixtures"
    )


def _execution_output(execution: Execution) -> ExecutionOutput:
    data = {
        name: (node.get("outputs") or [{}])[0].get("items", [])[:PREVIEW_ITEMS]
        for name, node in execution.nodes.items()
    }
    return ExecutionOutput(
        execution_id=execution.id,
        status=execution.status,
        data=data or None,
        error=execution.error,
        started_at=execution.started_at,
        finished_at=execution.finished_at,
        is_verification=execution.is_verification,
        simulation=execution.result.get("simulation"),
        ran_in=execution.ran_in,
    )


async def run_workflow(ctx: ToolContext[ExecutionTools], args: RunWorkflowInput) -> ExecutionOutput:
    execution = await ctx.services.runner.run(
        RunRequest(
            thread_id=ctx.thread_id,
            workflow_id=args.workflow_id,
            input_data=args.input_data,
            trigger_node_name=args.trigger_node_name,
            timeout_s=args.timeout / 1000,
            caller=ctx.caller,
        )
    )
    return _execution_output(execution)


class ExecutionIdInput(ToolModel):
    execution_id: str = Field(alias="executionId", min_length=1)


async def get_execution(
    ctx: ToolContext[ExecutionTools], args: ExecutionIdInput
) -> ExecutionOutput:
    return _execution_output(
        await visible_execution(
            ctx.services.executions, ctx.services.workflows, ctx.caller, args.execution_id
        )
    )


class ListExecutionsInput(ToolModel):
    workflow_id: str | None = Field(None, alias="workflowId")
    status: Literal["success", "error", "running", "waiting", "canceled"] | None = None
    limit: int = Field(20, ge=1, le=100)


class ExecutionSummary(ToolModel):
    id: str
    workflow_id: str = Field(alias="workflowId")
    workflow_name: str | None = Field(alias="workflowName")
    status: str
    started_at: datetime = Field(alias="startedAt")
    finished_at: datetime | None = Field(alias="finishedAt")
    mode: str
    ran_in: Literal["sandbox", "instance"] = Field(alias="ranIn")


class ListExecutionsOutput(ToolModel):
    executions: list[ExecutionSummary]


async def list_executions(
    ctx: ToolContext[ExecutionTools], args: ListExecutionsInput
) -> ListExecutionsOutput:
    listed = await ctx.services.executions.listing(
        workflow_id=args.workflow_id, status=args.status, limit=args.limit
    )
    names: dict[str, str | None] = {}
    hidden: set[str] = set()
    for execution in listed:
        if execution.workflow_id not in names and execution.workflow_id not in hidden:
            workflow = await ctx.services.workflows.get(execution.workflow_id)
            if workflow is not None and not ctx.caller.sees(workflow.project_id):
                hidden.add(execution.workflow_id)
            else:
                names[execution.workflow_id] = workflow.name if workflow else None
    found = [e for e in listed if e.workflow_id not in hidden]
    return ListExecutionsOutput(
        executions=[
            ExecutionSummary(
                id=e.id,
                workflow_id=e.workflow_id,
                workflow_name=names[e.workflow_id],
                status=e.status,
                started_at=e.started_at,
                finished_at=e.finished_at,
                mode=e.mode,
                ran_in=e.ran_in,
            )
            for e in found
        ]
    )


class FailedNode(ToolModel):
    name: str
    type: str | None
    error: str
    input_data: list[Any] | None = Field(None, alias="inputData")


class TraceEntry(ToolModel):
    name: str
    type: str | None
    status: str


class DebugExecutionOutput(ToolModel):
    execution_id: str = Field(alias="executionId")
    status: str
    failed_node: FailedNode | None = Field(None, alias="failedNode")
    node_trace: list[TraceEntry] = Field(alias="nodeTrace")


async def debug_execution(
    ctx: ToolContext[ExecutionTools], args: ExecutionIdInput
) -> DebugExecutionOutput:
    execution = await visible_execution(
        ctx.services.executions, ctx.services.workflows, ctx.caller, args.execution_id
    )
    workflow = await ctx.services.workflows.version_json(
        execution.version_id, execution.workflow_id
    )
    types = {str(n.get("name")): n.get("type") for n in workflow.get("nodes") or []}
    nodes = execution.nodes
    trace = [
        TraceEntry(name=name, type=types.get(name), status=str(nodes[name].get("status")))
        for name in execution.order
        if name in nodes
    ]
    failed_name = next((t.name for t in trace if t.status == "error"), None)
    failed = None
    if failed_name is not None:
        error = (nodes[failed_name].get("error") or {}).get("message") or execution.error or ""
        failed = FailedNode(
            name=failed_name,
            type=types.get(failed_name),
            error=error,
            input_data=_input_of(failed_name, workflow, nodes),
        )
    elif execution.status == "error" and execution.error:
        failed = FailedNode(name=execution.trigger_node or "", type=None, error=execution.error)
    return DebugExecutionOutput(
        execution_id=execution.id, status=execution.status, failed_node=failed, node_trace=trace
    )


def _input_of(name: str, workflow: dict[str, Any], nodes: dict[str, Any]) -> list[Any] | None:
    """What the node received: the items its parents sent down the connections into it."""
    received: list[Any] = []
    found = False
    for source, outputs in (workflow.get("connections") or {}).items():
        for index, slot in enumerate((outputs or {}).get("main") or []):
            if any(c.get("node") == name for c in slot or []) and source in nodes:
                outputs_of_source = nodes[source].get("outputs") or []
                if index < len(outputs_of_source):
                    received += outputs_of_source[index].get("items", [])
                    found = True
    return received if found else None


class NodeOutputInput(ExecutionIdInput):
    node_name: str = Field(alias="nodeName", min_length=1)


class NodeOutputOutput(ToolModel):
    node_name: str = Field(alias="nodeName")
    data: list[list[Any]] | None = Field(None, description="Items per output (up to 100 each)")
    item_counts: list[int] | None = Field(None, alias="itemCounts")
    error: str | None = None


async def get_node_output(
    ctx: ToolContext[ExecutionTools], args: NodeOutputInput
) -> NodeOutputOutput:
    execution = await visible_execution(
        ctx.services.executions, ctx.services.workflows, ctx.caller, args.execution_id
    )
    node = execution.nodes.get(args.node_name)
    if node is None:
        ran = ", ".join(execution.order) or "none"
        raise NotFoundError(
            f"node {args.node_name!r} did not run in execution {execution.id}; "
            f"nodes that ran: {ran}"
        )
    outputs = node.get("outputs") or []
    return NodeOutputOutput(
        node_name=args.node_name,
        data=[o.get("items", []) for o in outputs],
        item_counts=[int(o.get("count", 0)) for o in outputs],
        error=(node.get("error") or {}).get("message"),
    )


class StopExecutionOutput(ToolModel):
    success: bool
    message: str


async def stop_execution(
    ctx: ToolContext[ExecutionTools], args: ExecutionIdInput
) -> StopExecutionOutput:
    execution = await visible_execution(
        ctx.services.executions, ctx.services.workflows, ctx.caller, args.execution_id
    )
    if execution.ran_in == "instance":
        stopped, message = await ctx.services.executions.stop_in_instance(execution.id)
    else:
        stopped, message = await ctx.services.runner.stop(args.execution_id)
    return StopExecutionOutput(success=stopped, message=message)


NODE_OUTPUT_ITEMS = 20


class NodeCredential(ToolModel):
    id: str = Field(min_length=1)
    name: str | None = None


class ExecuteNodeInput(ToolModel):
    type: str = Field(min_length=1, description="Node type, e.g. n8n-nodes-base.httpRequest")
    version: float = Field(description="The node type's version (typeVersion)")
    parameters: dict[str, Any] = Field(default_factory=dict)
    credentials: dict[str, NodeCredential] | None = Field(
        None, description="Credential type → {id} of a credential the user may use"
    )
    input: list[dict[str, Any]] = Field(
        default_factory=list, max_length=50, description="The items the node receives"
    )
    timeout: int = Field(60_000, ge=1_000, le=300_000, description="Max wait in ms")


class ExecuteNodeOutput(ToolModel):
    status: str
    items: list[dict[str, Any]] = Field(default_factory=list)
    truncated: bool = False
    error: str | None = None


NODE_NAME = "Node"


async def execute_node(
    ctx: ToolContext[ExecutionTools], args: ExecuteNodeInput
) -> ExecuteNodeOutput:
    """One node, run on the given items in the sandbox (its real effects included: it is
    gated by executeNode); nothing is saved."""
    node: dict[str, Any] = {
        "name": NODE_NAME,
        "type": args.type,
        "typeVersion": args.version,
        "parameters": args.parameters,
    }
    if args.credentials:
        node["credentials"] = {
            k: v.model_dump(exclude_none=True) for k, v in args.credentials.items()
        }
    catalog = await ctx.services.catalog.get()
    errors = [f.message for f in catalog.check_workflow({"nodes": [node]}) if f.severity == "error"]
    if errors:
        raise InvalidArgumentError(f"the node does not match its type: {'; '.join(errors)}")
    report = await ctx.services.runner.execute_node(
        ctx.thread_id, node, args.input, timeout_s=args.timeout / 1000, caller=ctx.caller
    )
    if not report.get("ok", True):
        return ExecuteNodeOutput(status="error", error=str(report.get("message", "it failed")))
    ran = (report.get("nodes") or {}).get(NODE_NAME) or {}
    items = [i.get("json", i) for i in ((ran.get("outputs") or [{}])[0].get("items") or [])]
    failure = ran.get("error") or {}
    return ExecuteNodeOutput(
        status="error" if failure else str(report.get("status", "success")),
        items=items[:NODE_OUTPUT_ITEMS],
        truncated=len(items) > NODE_OUTPUT_ITEMS,
        error=failure.get("message") if isinstance(failure, dict) else str(failure) or None,
    )


def _node_grant(args: ExecuteNodeInput) -> str:
    """An "always" answer covers this node type doing this resource/operation (n8n's key)."""
    parts = [args.type]
    parts += [str(args.parameters[k]) for k in ("resource", "operation") if k in args.parameters]
    return "node:" + ":".join(parts)


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="run-workflow",
        description="Run a saved workflow in the sandbox and wait for it (default 5 min, at "
        "most 10; stopped at the timeout). inputData is shaped for the trigger type (chat, "
        "form, webhook, schedule). Nodes needing credentials or the network fail here.",
        group=GROUP,
        services=ExecutionTools,
        input_model=RunWorkflowInput,
        output_model=ExecutionOutput,
        handler=run_workflow,
        hitl_action="runWorkflow",
    ),
    ToolSpec(
        name="execute-node",
        description="Run one node on given input items in the sandbox and see its output, "
        "without building a workflow (e.g. to try a request or an expression). It runs for "
        "real, with the credential you name, so it asks the user first. Nothing is saved.",
        group=GROUP,
        services=ExecutionTools,
        input_model=ExecuteNodeInput,
        output_model=ExecuteNodeOutput,
        handler=execute_node,
        hitl_action="executeNode",
        grant=_node_grant,
    ),
    ToolSpec(
        name="get-execution",
        description="An execution's status and each node's first output, without waiting.",
        group=GROUP,
        services=ExecutionTools,
        input_model=ExecutionIdInput,
        output_model=ExecutionOutput,
        handler=get_execution,
    ),
    ToolSpec(
        name="list-executions",
        description="Recent executions, newest first, optionally by workflow and status.",
        group=GROUP,
        services=ExecutionTools,
        input_model=ListExecutionsInput,
        output_model=ListExecutionsOutput,
        handler=list_executions,
    ),
    ToolSpec(
        name="debug-execution",
        description="Why an execution failed: the failed node, its error and the items it "
        "received, and the trace of nodes that ran.",
        group=GROUP,
        services=ExecutionTools,
        input_model=ExecutionIdInput,
        output_model=DebugExecutionOutput,
        handler=debug_execution,
    ),
    ToolSpec(
        name="get-node-output",
        description="One node's output items (per output) in an execution.",
        group=GROUP,
        services=ExecutionTools,
        input_model=NodeOutputInput,
        output_model=NodeOutputOutput,
        handler=get_node_output,
    ),
    ToolSpec(
        name="stop-execution",
        description="Stop a running execution after its current node.",
        group=GROUP,
        services=ExecutionTools,
        input_model=ExecutionIdInput,
        output_model=StopExecutionOutput,
        handler=stop_execution,
    ),
]


class ResolvedParametersInput(NodeOutputInput):
    item_index: int = Field(
        0, alias="itemIndex", ge=0, description="The input item to resolve against (default 0)"
    )
    run_index: int | None = Field(
        None,
        alias="runIndex",
        ge=0,
        description="Which run of the node, if it ran more than once (default: its last, the "
        "only one an execution keeps)",
    )


class FailedExpression(ToolModel):
    path: str
    raw: str
    error: str
    reason: Literal["expression-error", "unreconstructable-context"] | None = None


class EmptyResolution(ToolModel):
    path: str
    raw: str
    resolved: Literal[""] | None = Field(description='null (or undefined) or ""')
    reason: Literal["unreconstructable-context"] | None = None


class ResolvedParametersOutput(ToolModel):
    node_name: str = Field(alias="nodeName")
    run_index: int = Field(alias="runIndex")
    item_index: int = Field(alias="itemIndex")
    parameters: dict[str, Any] | None = Field(description="As configured, expressions raw")
    resolved: str | None = Field(
        description="The same tree as JSON text, each expression replaced by its value"
    )
    failed_expressions: list[FailedExpression] = Field(alias="failedExpressions")
    empty_resolutions: list[EmptyResolution] = Field(
        alias="emptyResolutions",
        description="Expressions that came out null or empty: the usual silent cause of an "
        "empty field downstream",
    )


async def get_resolved_parameters(
    ctx: ToolContext[ExecutionTools], args: ResolvedParametersInput
) -> ResolvedParametersOutput:
    """Replay the node's expressions against the execution's record in the sandbox's engine
    (nothing runs: what the nodes output is the record's)."""
    execution = await visible_execution(
        ctx.services.executions, ctx.services.workflows, ctx.caller, args.execution_id
    )
    found = await ctx.services.runner.resolve_parameters(
        ctx.thread_id,
        execution,
        args.node_name,
        item_index=args.item_index,
        run_index=args.run_index,
    )
    resolved = found.resolved
    return ResolvedParametersOutput(
        node_name=found.node_name,
        run_index=found.run_index,
        item_index=found.item_index,
        parameters=found.parameters,
        resolved=json.dumps(resolved, indent=2) if resolved is not None else None,
        failed_expressions=[FailedExpression.model_validate(f) for f in found.failed_expressions],
        empty_resolutions=[EmptyResolution.model_validate(e) for e in found.empty_resolutions],
    )


TOOLS.append(
    ToolSpec(
        name="get-resolved-parameters",
        description="Replay a node's parameter expressions against a past execution: its raw "
        "parameters, the resolved tree, the expressions that threw (failedExpressions) and "
        "those that came out null or empty (emptyResolutions). Use it when a node got an "
        "unexpected value; nothing runs again.",
        group=GROUP,
        services=ExecutionTools,
        input_model=ResolvedParametersInput,
        output_model=ResolvedParametersOutput,
        handler=get_resolved_parameters,
    )
)
