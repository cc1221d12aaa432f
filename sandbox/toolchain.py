"""The toolchain calls of a thread's sandbox: the workflow SDK's compiler and the n8n engine
running in it (`image/bin/ops.mjs`), each one operation of its worker. A `ThreadToolchain` is
bound to one thread (`SandboxManager.toolchain(thread_id)`), so its callers name it once.

Each answers a typed reply (toolchain_results.py). A failed build or run is data (`ok` False,
its `stage` and `message`), not an error: the caller reports it to the model. Errors are for a
sandbox that cannot answer (SandboxError), or answers what no operation answers.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from sandbox import files
from sandbox.errors import SandboxUnavailableError
from sandbox.toolchain_results import (
    Compiled,
    Diagnosed,
    NodeDefinition,
    NodeResources,
    NodeTypeWritten,
    ResolvedParameters,
    RunReport,
    WorkflowCode,
)

__all__ = ["CPU_DEADLINE_ALLOWANCE", "ThreadToolchain"]

# The compile thread's deadline is its CPU time, which a busy sandbox may stretch on the clock up
# to this many times (ops.mjs BUSY_ALLOWANCE): the host waits that long for its operations.
CPU_DEADLINE_ALLOWANCE = 4

Reply = TypeVar("Reply", bound=BaseModel)


def _parsed(model: type[Reply], op: str, reply: Any) -> Reply:
    try:
        return model.model_validate(reply)
    except ValidationError as exc:
        raise SandboxUnavailableError(
            f"the sandbox's toolchain answered {op} with what it never answers: {exc}"
        ) from None


class _Operates(Protocol):
    max_file_bytes: int

    async def operation(
        self, thread_id: str, op: str, *, timeout_s: float = 10.0, **args: Any
    ) -> Any: ...


class ThreadToolchain:
    """The calls for one thread, over its sandboxes' `operation` (the sandbox is acquired by
    the first call, as for any operation)."""

    def __init__(self, sandboxes: _Operates, thread_id: str) -> None:
        self._sandboxes = sandboxes
        self.thread_id = thread_id

    async def _operation(self, op: str, *, timeout_s: float = 10.0, **args: Any) -> Any:
        return await self._sandboxes.operation(self.thread_id, op, timeout_s=timeout_s, **args)

    async def compile(
        self,
        path: str,
        *,
        timeout_s: float = 5.0,
        max_bytes: int | None = None,
    ) -> Compiled:
        """Compile and validate a `.workflow.ts` (or WorkflowJSON) source with the SDK in the
        sandbox (failed at the stage load, export or timeout: data, not an error)."""
        reply = await self._source_operation("compile", path, timeout_s, max_bytes)
        return _parsed(Compiled, "compile", reply)

    async def diagnose(self, path: str, *, timeout_s: float = 5.0) -> Diagnosed:
        """TypeScript diagnostics for one source and its imports, with the workspace's
        tsconfig (`ok` False: the check itself failed or ran out of time)."""
        reply = await self._source_operation("diagnose", path, timeout_s, None)
        return _parsed(Diagnosed, "diagnose", reply)

    async def workflow_to_code(
        self, workflow: dict[str, Any], *, timeout_s: float = 5.0
    ) -> WorkflowCode:
        """WorkflowJSON as SDK TypeScript."""
        reply = await self._operation(
            "toCode",
            timeout_s=timeout_s * CPU_DEADLINE_ALLOWANCE,
            workflow=workflow,
            timeoutMs=int(timeout_s * 1000),
        )
        return _parsed(WorkflowCode, "toCode", reply)

    async def node_definition(
        self,
        node_type: str,
        version: float,
        *,
        resource: str | None = None,
        operation: str | None = None,
        mode: str | None = None,
    ) -> NodeDefinition:
        """The TypeScript parameter types of one node version (of one resource/operation or
        mode when the node is split by them)."""
        reply = await self._operation(
            "definition",
            nodeType=node_type,
            version=version,
            resource=resource,
            operation=operation,
            mode=mode,
        )
        return _parsed(NodeDefinition, "definition", reply)

    async def materialize_node_type(
        self,
        node_type: str,
        version: float,
        *,
        description: dict[str, Any] | None = None,
        resource: str | None = None,
        operation: str | None = None,
        mode: str | None = None,
    ) -> NodeTypeWritten:
        """Write one node version's typed parameters into the workspace (`node-types/...`):
        the image's files (a split node's whole folder), or generated from `description`
        (the catalog's entry) when the image has none; `content` is the file of the
        resource/operation or mode asked about, else the main one."""
        reply = await self._operation(
            "materialize",
            timeout_s=30.0,
            nodeType=node_type,
            version=version,
            description=description,
            resource=resource,
            operation=operation,
            mode=mode,
            maxBytes=self._sandboxes.max_file_bytes,
        )
        return _parsed(NodeTypeWritten, "materialize", reply)

    async def execute(
        self,
        workflow: dict[str, Any],
        *,
        execution_id: str,
        pin_data: dict[str, list[Any]] | None = None,
        start_node: str | None = None,
        timeout_s: float = 300.0,
        credentials: dict[str, dict[str, Any]] | None = None,
    ) -> RunReport:
        """Run a WorkflowJSON on the n8n engine in the sandbox, nodes in `pin_data` replaced by
        their items (`ok` False when it could not finish: timeout, memory). `credentials`
        (id → {type, data}) are what a live run's nodes may use."""
        reply = await self._operation(
            "execute",
            timeout_s=timeout_s,
            executionId=execution_id,
            workflow=workflow,
            pinData=pin_data or {},
            startNode=start_node,
            credentials=credentials or {},
            timeoutMs=int(timeout_s * 1000),
        )
        return _parsed(RunReport, "execute", reply)

    async def node_resources(
        self,
        node: dict[str, Any],
        *,
        lookup: str,
        method: str,
        credentials: dict[str, dict[str, Any]],
        filter_text: str | None = None,
        pagination_token: str | None = None,
        timeout_s: float = 30.0,
    ) -> NodeResources:
        """Run a node type's listSearch / loadOptions method in the sandbox with the given
        credential data (its requests go out through the egress proxy)."""
        reply = await self._operation(
            "nodeResources",
            timeout_s=timeout_s,
            node=node,
            lookup=lookup,
            method=method,
            credentials=credentials,
            filter=filter_text,
            paginationToken=pagination_token,
            timeoutMs=int(timeout_s * 1000),
        )
        return _parsed(NodeResources, "nodeResources", reply)

    async def resolve_parameters(
        self,
        workflow: dict[str, Any],
        *,
        nodes: dict[str, Any],
        node_name: str,
        execution_id: str,
        mode: str = "manual",
        run_index: int | None = None,
        item_index: int = 0,
        timeout_s: float = 30.0,
    ) -> ResolvedParameters:
        """A node's parameters with each expression evaluated by the engine against a past run
        (`nodes`: the run's record, each node's `outputs` and `runs`)."""
        reply = await self._operation(
            "resolveParameters",
            timeout_s=timeout_s,
            workflow=workflow,
            nodes=nodes,
            nodeName=node_name,
            runIndex=run_index,
            itemIndex=item_index,
            executionId=execution_id,
            mode=mode,
            timeoutMs=int(timeout_s * 1000),
        )
        return _parsed(ResolvedParameters, "resolveParameters", reply)

    async def output_schema(
        self,
        node_type: str,
        version: float,
        *,
        resource: str | None = None,
        operation: str | None = None,
    ) -> dict[str, Any] | None:
        """The JSON Schema n8n-nodes-base ships for a node version's output (for one
        resource/operation), or None when it ships none."""
        found = await self._operation(
            "outputSchema",
            nodeType=node_type,
            version=version,
            resource=resource,
            operation=operation,
        )
        schema = found.get("schema")
        return dict(schema) if isinstance(schema, dict) else None

    async def cancel_execution(self, execution_id: str) -> None:
        """Ask a run in progress to stop after its current node."""
        await self._operation("cancelExecution", executionId=execution_id)

    async def _source_operation(
        self, op: str, path: str, timeout_s: float, max_bytes: int | None
    ) -> Any:
        """A compile or diagnose of one workspace source, its CPU deadline allowed for."""
        files.confine(path)
        return await self._operation(
            op,
            timeout_s=timeout_s * CPU_DEADLINE_ALLOWANCE,
            path=path,
            timeoutMs=int(timeout_s * 1000),
            maxBytes=max_bytes or self._sandboxes.max_file_bytes,
        )
