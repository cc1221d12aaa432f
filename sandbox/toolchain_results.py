"""What the toolchain's operations answer (`image/bin/ops.mjs`, through the worker), checked at
the boundary: each reply a model with the fields its callers read, named in Python's way (the
worker's camelCase as aliases). A failed build or run is data: `ok` False with the `stage`
that failed (load, export, timeout, ...) and a `message`. Fields the callers do not read are
kept (`raw()` gives the reply as the worker sent it, for records that store it whole).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "Compiled",
    "Diagnosed",
    "Diagnostic",
    "NodeDefinition",
    "NodeResources",
    "NodeTypeWritten",
    "ResolvedParameters",
    "RunReport",
    "SdkIssue",
    "WorkflowCode",
]


class _Reply(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True
    )

    def raw(self) -> dict[str, Any]:
        """The reply as the worker sent it (its own field names, nothing added)."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class _Outcome(_Reply):
    """A reply that may be a failure of the thing asked for (not of the sandbox)."""

    ok: bool = True
    stage: str | None = None
    message: str = ""  # why it failed


class SdkIssue(_Reply):
    """One finding of the SDK's validation of a compiled workflow."""

    severity: str = "error"
    message: str = ""
    source: str = "graph"
    code: str | None = None
    node_name: str | None = None
    path: str | None = None
    line: int | None = None
    column: int | None = None


class Compiled(_Outcome):
    """A workflow source compiled and validated by the SDK (or why not)."""

    workflow: dict[str, Any] = Field(default_factory=dict)  # empty when it failed
    # The pin data the source declared for verification, by node name.
    fixtures: dict[str, Any] = Field(default_factory=dict)
    issues: list[SdkIssue] = Field(default_factory=list)
    source_hash: str | None = None
    # Whether the source imports the node types (then TypeScript's check is worth running).
    typed: bool = False


class Diagnostic(_Reply):
    """One TypeScript error: where, its code (TS2322, ...) and message."""

    file: str
    line: int
    column: int
    code: str
    message: str


class Diagnosed(_Outcome):
    """TypeScript's errors for a source and its imports (`ok` False: the check itself failed
    or ran out of time)."""

    diagnostics: list[Diagnostic] = Field(default_factory=list)


class WorkflowCode(_Outcome):
    """WorkflowJSON written as SDK TypeScript."""

    code: str | None = None


class NodeDefinition(_Reply):
    """One node version's TypeScript parameter types (of one resource/operation or mode when
    the node is split by them)."""

    file: str
    content: str
    # A split node's choices ({resource, operation} or {mode}); empty for a single file.
    discriminators: list[dict[str, str]] = Field(default_factory=list)


class NodeTypeWritten(_Reply):
    """One node version's typed parameters, written into the workspace (`node-types/...`)."""

    path: str
    content: str
    source: str  # image | generated
    files: list[str] = Field(default_factory=list)


class RunReport(_Outcome):
    """A workflow run on the n8n engine in the sandbox: its status, the order the nodes ran in,
    each node's `{status, outputs, error, pinned, runs}`, the run's error if it failed; or
    `ok` False when it could not finish (timeout, memory)."""

    status: str | None = None
    order: list[str] = Field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # The run's own failure, `{message, node?, description?}`; empty when it has none.
    error: dict[str, Any] = Field(default_factory=dict)
    # What the workflow's code wrote to its console, in order.
    logs: list[str] = Field(default_factory=list)


class NodeResources(_Outcome):
    """What a node type's listSearch / loadOptions method returned, and which it was."""

    lookup: str | None = None  # listSearch | loadOptions
    value: Any = None


class ResolvedParameters(_Outcome):
    """A node's parameters with each expression evaluated against a past run."""

    node_name: str = ""
    run_index: int = 0
    item_index: int = 0
    parameters: dict[str, Any] = Field(default_factory=dict)
    resolved: Any = None  # the parameters' tree with each expression's value
    failed_expressions: list[dict[str, Any]] = Field(default_factory=list)
    empty_resolutions: list[dict[str, Any]] = Field(default_factory=list)
