"""Reading workflows without changing them: validate a workspace source (the build's compile
and checks, nothing saved) or a saved workflow, and which node types the workflows in scope
use (n8n's `workflows` actions `validate` and `node-usage`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from server.catalog import CatalogService
from server.core.caller import INSTANCE_SCOPED, Caller
from server.instance import Credentials, Executions, Workflows
from server.instance.types import Workflow, WorkflowSummary
from server.pipeline.build import BuildIssue, BuildRequest, WorkflowBuilder
from server.tools.build import BuildIssueModel
from server.tools.scope import check_project, visible_workflow
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "WorkflowCheckTools"]

GROUP = "workflows"

# n8n's issue categories (what the canvas marks on a node).
IssueCategory = Literal[
    "parameters", "credentials", "input", "execution", "typeUnknown", "aiGateway", "chatModel"
]
# The order a node's issues are listed in.
CATEGORIES: tuple[IssueCategory, ...] = ("typeUnknown", "parameters", "credentials", "input")


@dataclass(frozen=True, kw_only=True)
class WorkflowCheckTools:
    """What the checking tools read: workflows, the credentials nodes reference, the last run,
    the builder's compile and the catalog."""

    workflows: Workflows
    credentials: Credentials
    executions: Executions
    builder: WorkflowBuilder
    catalog: CatalogService


# -- validate-workflow -----------------------------------------------------------------------


class ValidateWorkflowInput(ToolModel):
    file_path: str | None = Field(
        None,
        alias="filePath",
        description="Workspace source (.workflow.ts or WorkflowJSON) to check as build-workflow "
        "would: compiled and validated, nothing saved",
    )
    workflow_id: str | None = Field(
        None,
        alias="workflowId",
        min_length=1,
        description="A saved workflow to check instead: its nodes' configuration and its last "
        "run (static; nothing runs)",
    )
    ignore_issues: list[IssueCategory] | None = Field(
        None, alias="ignoreIssues", description="Issue categories to leave out of the result"
    )

    @model_validator(mode="after")
    def _one_target(self) -> ValidateWorkflowInput:
        if (self.file_path is None) == (self.workflow_id is None):
            raise ValueError("give filePath (a workspace source) or workflowId, not both")
        return self


class NodeIssues(ToolModel):
    """One node's issues by category, each a map of what is wrong to its messages."""

    type_unknown: bool | None = Field(None, alias="typeUnknown")
    parameters: dict[str, list[str]] | None = None
    credentials: dict[str, list[str]] | None = None
    input: dict[str, list[str]] | None = None
    execution: bool | None = Field(None, description="Its last run failed here")


class PinnedNode(ToolModel):
    node_name: str = Field(alias="nodeName")
    item_count: int = Field(alias="itemCount")


class ValidateWorkflowOutput(ToolModel):
    success: bool = Field(
        description="No errors: build-workflow would save the source (a saved workflow: its "
        "configuration has none)"
    )
    valid: bool = Field(description="success, and no issue left in summary")
    file_path: str | None = Field(None, alias="filePath")
    workflow_id: str | None = Field(None, alias="workflowId")
    node_count: int | None = Field(None, alias="nodeCount")
    errors: list[BuildIssueModel] = Field(default_factory=list)
    warnings: list[BuildIssueModel] = Field(default_factory=list)
    issues: dict[str, NodeIssues] = Field(
        default_factory=dict, description="By node name: what the canvas would mark on it"
    )
    summary: list[str] = Field(
        default_factory=list, description='One line an issue: "<node>: <category>.<key>: ..."'
    )
    mocked_credential_types: list[str] = Field(default_factory=list, alias="mockedCredentialTypes")
    mocked_node_names: list[str] = Field(default_factory=list, alias="mockedNodeNames")
    credential_note: str | None = Field(None, alias="credentialNote")
    pinned_nodes: list[PinnedNode] | None = Field(None, alias="pinnedNodes")
    pinned_data_note: str | None = Field(None, alias="pinnedDataNote")


class _Issues:
    """Issues collected by node, then filtered by the categories to ignore."""

    def __init__(self, ignore: list[IssueCategory] | None) -> None:
        self.ignore = set(ignore or [])
        self.by_node: dict[str, dict[str, Any]] = {}
        self.lines: list[tuple[str, IssueCategory, str]] = []  # node, category, the line's rest

    def add(self, node: str, category: IssueCategory, key: str, message: str) -> None:
        if category in self.ignore:
            return
        found = self.by_node.setdefault(node, {})
        if category == "typeUnknown":
            found["typeUnknown"] = True
            self.lines.append((node, category, "typeUnknown: Unknown node type"))
        elif category == "execution":
            found["execution"] = True
            self.lines.append(
                (node, category, f"execution: A previous execution of this node failed: {message}")
            )
        else:
            found.setdefault(category, {}).setdefault(key, []).append(message)
            self.lines.append((node, category, f"{category}.{key}: {message}"))

    def issue(self, found: BuildIssue) -> None:
        """A validation finding on a node, in n8n's category for it."""
        if found.node_name is None:
            return
        if found.code == "UNKNOWN_NODE_TYPE":
            self.add(found.node_name, "typeUnknown", "", found.message)
        elif found.source == "credentials":
            key = (found.path or "").removeprefix("credentials.") or found.code or "credentials"
            self.add(found.node_name, "credentials", key, found.message)
        elif found.source == "graph":  # the SDK's graph checks: connections and sub-nodes
            self.add(found.node_name, "input", found.code or "connection", found.message)
        else:
            key = found.path or found.code or found.source
            self.add(found.node_name, "parameters", key, found.message)

    def result(self) -> tuple[dict[str, NodeIssues], list[str]]:
        order: dict[str, int] = {c: i for i, c in enumerate((*CATEGORIES, "execution"))}
        nodes = list(self.by_node)
        lines = sorted(self.lines, key=lambda line: (nodes.index(line[0]), order[line[1]]))
        return (
            {name: NodeIssues.model_validate(found) for name, found in self.by_node.items()},
            [f"{node}: {rest}" for node, _, rest in lines],
        )


def _models(issues: list[BuildIssue]) -> list[BuildIssueModel]:
    return [BuildIssueModel(**asdict(issue)) for issue in issues]


async def validate_workflow(
    ctx: ToolContext[WorkflowCheckTools], args: ValidateWorkflowInput
) -> ValidateWorkflowOutput:
    issues = _Issues(args.ignore_issues)
    if args.file_path is not None:
        return await _validate_source(ctx, args.file_path, issues)
    assert args.workflow_id is not None
    return await _validate_saved(ctx, args.workflow_id, issues)


async def _validate_source(
    ctx: ToolContext[WorkflowCheckTools], file_path: str, issues: _Issues
) -> ValidateWorkflowOutput:
    """The build's compile and layers of checks; what a save would bind or mock, unsaved."""
    checked = await ctx.services.builder.validate(
        BuildRequest(thread_id=ctx.thread_id, file_path=file_path, caller=ctx.caller)
    )
    outcome = checked.outcome
    for error in outcome.errors:
        issues.issue(error)
    for node, kinds in outcome.mocked_credentials.items():
        for kind in kinds:
            issues.add(
                node,
                "credentials",
                kind,
                f"Credentials for {kind} are not set: no single credential of the user's "
                "matches, so a build leaves the node mocked (verification simulates it)",
            )
    found, summary = issues.result()
    nodes = (checked.workflow or {}).get("nodes")
    return ValidateWorkflowOutput(
        success=outcome.success,
        valid=outcome.success and not summary,
        file_path=file_path,
        node_count=len(nodes) if isinstance(nodes, list) else None,
        errors=_models(outcome.errors),
        warnings=_models(outcome.warnings),
        issues=found,
        summary=summary,
        mocked_credential_types=outcome.mocked_credential_types,
        mocked_node_names=list(outcome.mocked_credentials),
        credential_note=outcome.credential_note,
    )


PINNED_NOTE = (
    "These nodes have output declared by the source (not part of the workflow): run-workflow "
    "outputs those items instead of running them, so its runs are not live tests of them. "
    "Building the source without them clears them."
)


async def _validate_saved(
    ctx: ToolContext[WorkflowCheckTools], workflow_id: str, issues: _Issues
) -> ValidateWorkflowOutput:
    """The catalog's checks of the saved nodes, the credentials they reference, and the
    nodes its last run failed at."""
    services = ctx.services
    workflow = await visible_workflow(services.workflows, ctx.caller, workflow_id)
    findings = (await services.catalog.get()).check_workflow(workflow.as_json())
    errors: list[BuildIssue] = []
    warnings: list[BuildIssue] = []
    for f in findings:
        issue = BuildIssue(
            message=f.message, source=f.source, code=f.code, node_name=f.node_name, path=f.path
        )
        (errors if f.severity == "error" else warnings).append(issue)
    warnings += await _unknown_credentials(services, ctx.caller, workflow)
    for error in errors:
        issues.issue(error)
    for warning in warnings:
        if warning.code in ("MISSING_CREDENTIAL", "CREDENTIAL_NOT_FOUND"):
            issues.issue(warning)
    if "execution" not in issues.ignore:
        latest = await services.executions.listing(workflow_id=workflow.id, limit=1)
        for name, node in (latest[0].nodes if latest else {}).items():
            if node.get("error"):
                issues.add(name, "execution", "", str(node["error"].get("message") or "failed"))
    declared, _plan = await services.workflows.verification_inputs(workflow.current_version_id)
    pinned = [PinnedNode(node_name=n, item_count=len(items)) for n, items in declared.items()]
    found, summary = issues.result()
    return ValidateWorkflowOutput(
        success=not errors,
        valid=not errors and not summary,
        workflow_id=workflow.id,
        node_count=len(workflow.nodes),
        errors=_models(errors),
        warnings=_models(warnings),
        issues=found,
        summary=summary,
        pinned_nodes=pinned or None,
        pinned_data_note=PINNED_NOTE if pinned else None,
    )


async def _unknown_credentials(
    services: WorkflowCheckTools, caller: Caller, workflow: Workflow
) -> list[BuildIssue]:
    """A credential a node references that the user has none of (deleted, or another
    project's): the node cannot run with it."""
    usable = {c.id for c in await services.credentials.all(sorted(caller.project_ids))}
    missing = []
    for node in workflow.nodes:
        for kind, ref in (node.get("credentials") or {}).items():
            if not isinstance(ref, dict) or not ref.get("id") or ref["id"] in usable:
                continue
            name = ref.get("name") or ref["id"]
            missing.append(
                BuildIssue(
                    message=f"Credentials with name {name} do not exist for {kind}: choose "
                    "one of the user's (setup-workflow) or create one",
                    source="credentials",
                    code="CREDENTIAL_NOT_FOUND",
                    node_name=str(node.get("name")),
                    path=f"credentials.{kind}",
                )
            )
    return missing


# -- get-node-usage --------------------------------------------------------------------------

DEFAULT_TYPE_LIMIT = 100
DEFAULT_WORKFLOW_LIMIT = 10


class NodeUsageInput(ToolModel):
    node_type: str | None = Field(
        None,
        alias="nodeType",
        min_length=1,
        description='One full node type, e.g. "n8n-nodes-base.slack": the workflows using it, '
        "most recently changed first. Omit it for every type in use, most used first",
    )
    limit: int | None = Field(
        None,
        ge=1,
        le=200,
        description=f"Max results (default {DEFAULT_TYPE_LIMIT} types, or "
        f"{DEFAULT_WORKFLOW_LIMIT} workflows)",
    )
    scope: Literal["project", "instance"] | None = Field(
        None,
        description="Which projects to read: this conversation's (default) or every one the "
        "user can see",
    )
    project_id: str | None = Field(
        None, alias="projectId", description="Read this one project (of those the user sees)"
    )


class NodeTypeCount(ToolModel):
    node_type: str = Field(alias="nodeType")
    workflow_count: int = Field(alias="workflowCount")


class NodeTypeUser(ToolModel):
    workflow_id: str = Field(alias="workflowId")
    name: str
    updated_at: datetime = Field(alias="updatedAt")


class NodeUsageOutput(ToolModel):
    node_type: str | None = Field(None, alias="nodeType")
    workflows_in_scope: int = Field(
        alias="workflowsInScope", description="Workflows the counts are out of"
    )
    node_types: list[NodeTypeCount] | None = Field(None, alias="nodeTypes")
    workflows: list[NodeTypeUser] | None = None
    truncated: bool | None = Field(None, description="The limit cut the list short")
    note: str | None = None


def _in_scope(
    rows: list[tuple[WorkflowSummary, frozenset[str]]], caller: Caller, args: NodeUsageInput
) -> list[tuple[WorkflowSummary, frozenset[str]]]:
    """The workflows of the project asked for, of the conversation's, or (scope instance)
    of every project the caller sees (they come filtered by that already). A workflow an n8n
    instance scoped by the call's key belongs to every scope."""
    if args.project_id is None and args.scope == "instance":
        return rows
    project = check_project(caller, args.project_id)
    return [
        row
        for row in rows
        if row[0].project_id == INSTANCE_SCOPED or Caller.project_of(row[0].project_id) == project
    ]


async def get_node_usage(
    ctx: ToolContext[WorkflowCheckTools], args: NodeUsageInput
) -> NodeUsageOutput:
    rows = _in_scope(await ctx.services.workflows.node_types(caller=ctx.caller), ctx.caller, args)
    if args.node_type is not None:
        limit = args.limit or DEFAULT_WORKFLOW_LIMIT
        using = sorted(
            (summary for summary, types in rows if args.node_type in types),
            key=lambda s: (s.updated_at, s.id),
            reverse=True,
        )
        return NodeUsageOutput(
            node_type=args.node_type,
            workflows_in_scope=len(rows),
            workflows=[
                NodeTypeUser(workflow_id=s.id, name=s.name, updated_at=s.updated_at)
                for s in using[:limit]
            ],
            truncated=True if len(using) > limit else None,
        )
    limit = args.limit or DEFAULT_TYPE_LIMIT
    counts: dict[str, int] = {}
    for _summary, types in rows:
        for kind in types:
            counts[kind] = counts.get(kind, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    truncated = len(ranked) > limit
    absence = (
        f"The list is cut at the {limit} most used types: a type missing from it may still be "
        "in use, so do not take its absence as evidence. Raise limit, or narrow with projectId."
        if truncated
        else "A type missing from the list is used by no workflow in scope."
    )
    return NodeUsageOutput(
        workflows_in_scope=len(rows),
        node_types=[NodeTypeCount(node_type=k, workflow_count=n) for k, n in ranked[:limit]],
        truncated=True if truncated else None,
        note=f"Each count is how many workflows (of workflowsInScope) use the type. {absence} "
        "These are node types only: for how a node is configured (retries, naming, model "
        "options), read one workflow with get-workflow.",
    )


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="validate-workflow",
        description="Check a workflow without saving anything: a workspace source (filePath) "
        "compiled and validated as build-workflow would, or a saved workflow (workflowId) "
        "statically, with its last run. Returns success, errors, warnings, nodeCount, and per "
        "node the issues the canvas would mark (missing credentials, parameter problems, "
        "unknown types, failed last run).",
        group=GROUP,
        services=WorkflowCheckTools,
        input_model=ValidateWorkflowInput,
        output_model=ValidateWorkflowOutput,
        handler=validate_workflow,
    ),
    ToolSpec(
        name="get-node-usage",
        description="Which node types the workflows in scope use, and how many use each, most "
        "used first; or, with nodeType, the workflows using that type. Read it before opening "
        "workflows when the question is what is built here or which integration is the local "
        "habit.",
        group=GROUP,
        services=WorkflowCheckTools,
        input_model=NodeUsageInput,
        output_model=NodeUsageOutput,
        handler=get_node_usage,
    ),
]
