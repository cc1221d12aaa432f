"""Workflow tools over the workflow store: listing, reading, archiving, publishing and the
version history (the version tools only where the licence setting enables them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from server.catalog import Catalog, CatalogService
from server.errors import InvalidArgumentError, UnavailableError
from server.instance import Credentials, Features, Workflows
from server.instance.types import VersionInfo, Workflow
from server.pipeline.build import WorkflowBuilder
from server.pipeline.setup import (
    TEMPLATED_AUTH,
    NodeSetup,
    hint_problems,
    needed,
    service_url,
)
from server.runtime.events import EventLog
from server.runtime.hitl import Hitl
from server.tools.approval_cards import APPROVAL_SUMMARY
from server.tools.credential_setup import SetupHint
from server.tools.scope import visible_workflow
from server.tools.spec import Suspend, ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "WorkflowTools"]

GROUP = "workflows"


@dataclass(frozen=True, kw_only=True)
class WorkflowTools:
    """What the workflow tools may touch."""

    workflows: Workflows
    credentials: Credentials
    features: Features
    builder: WorkflowBuilder
    catalog: CatalogService
    hitl: Hitl
    # For setup-workflow's list of what a workflow still needs (n8n's `setup-items`).
    events: EventLog


class ListWorkflowsInput(ToolModel):
    query: str | None = Field(None, description="Filter by name")
    limit: int = Field(50, ge=1, le=100)
    status: Literal["active", "archived", "all"] = "active"


class WorkflowHeader(ToolModel):
    id: str
    name: str
    active_version_id: str | None = Field(alias="activeVersionId")
    is_archived: bool = Field(alias="isArchived")


class WorkflowSummary(WorkflowHeader):
    created_at: datetime = Field(alias="createdAt")
    updated_at: datetime = Field(alias="updatedAt")


class ListWorkflowsOutput(ToolModel):
    workflows: list[WorkflowSummary]


async def list_workflows(
    ctx: ToolContext[WorkflowTools], args: ListWorkflowsInput
) -> ListWorkflowsOutput:
    rows = await ctx.services.workflows.listing(
        query=args.query, limit=args.limit, status=args.status, caller=ctx.caller
    )
    return ListWorkflowsOutput(
        workflows=[
            WorkflowSummary(
                id=row.id,
                name=row.name,
                active_version_id=row.active_version_id,
                is_archived=row.is_archived,
                created_at=row.created_at,
                updated_at=row.updated_at,
            )
            for row in rows
        ]
    )


class WorkflowIdInput(ToolModel):
    workflow_id: str = Field(alias="workflowId", min_length=1)


class GetWorkflowOutput(WorkflowHeader):
    version_id: str = Field(alias="versionId")
    nodes: list[Any]
    connections: dict[str, Any]
    settings: dict[str, Any]


async def get_workflow(ctx: ToolContext[WorkflowTools], args: WorkflowIdInput) -> GetWorkflowOutput:
    workflow: Workflow = await visible_workflow(
        ctx.services.workflows, ctx.caller, args.workflow_id
    )
    return GetWorkflowOutput(
        id=workflow.id,
        name=workflow.name,
        active_version_id=workflow.active_version_id,
        is_archived=workflow.is_archived,
        version_id=workflow.current_version_id,
        nodes=workflow.nodes,
        connections=workflow.connections,
        settings=workflow.settings,
    )


class WorkflowCodeOutput(ToolModel):
    workflow_id: str = Field(alias="workflowId")
    code: str


async def get_workflow_as_code(
    ctx: ToolContext[WorkflowTools], args: WorkflowIdInput
) -> WorkflowCodeOutput:
    workflow = await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    toolchain = await ctx.services.builder.toolchain(ctx.thread_id)
    generated = await toolchain.workflow_to_code(workflow.as_json())
    if not generated.ok or generated.code is None:
        raise UnavailableError(f"generating code failed: {generated.message}")
    return WorkflowCodeOutput(workflow_id=workflow.id, code=generated.code)


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="list-workflows",
        description="List workflows, newest change first.",
        group=GROUP,
        services=WorkflowTools,
        input_model=ListWorkflowsInput,
        output_model=ListWorkflowsOutput,
        handler=list_workflows,
    ),
    ToolSpec(
        name="get-workflow",
        description="A workflow's full definition: nodes, connections and settings.",
        group=GROUP,
        services=WorkflowTools,
        input_model=WorkflowIdInput,
        output_model=GetWorkflowOutput,
        handler=get_workflow,
    ),
    ToolSpec(
        name="get-workflow-as-code",
        description="A workflow as workflow SDK TypeScript. To change it, write the code to a "
        "workspace file and call build-workflow with that filePath and this workflowId once; "
        "later builds need only filePath.",
        group=GROUP,
        services=WorkflowTools,
        input_model=WorkflowIdInput,
        output_model=WorkflowCodeOutput,
        handler=get_workflow_as_code,
    ),
]


class SuccessOutput(ToolModel):
    success: bool


async def delete_workflow(ctx: ToolContext[WorkflowTools], args: WorkflowIdInput) -> SuccessOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    await ctx.services.workflows.set_archived(args.workflow_id, True)
    return SuccessOutput(success=True)


async def unarchive_workflow(
    ctx: ToolContext[WorkflowTools], args: WorkflowIdInput
) -> SuccessOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    await ctx.services.workflows.set_archived(args.workflow_id, False)
    return SuccessOutput(success=True)


class PublishInput(WorkflowIdInput):
    version_id: str | None = Field(
        None, alias="versionId", description="Version to publish (default: the latest draft)"
    )
    approval_summary: str | None = Field(None, alias="approvalSummary", **APPROVAL_SUMMARY)


class PublishOutput(ToolModel):
    success: bool
    active_version_id: str = Field(alias="activeVersionId")


async def publish_workflow(ctx: ToolContext[WorkflowTools], args: PublishInput) -> PublishOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    active = await ctx.services.workflows.publish(args.workflow_id, args.version_id)
    return PublishOutput(success=True, active_version_id=active)


async def unpublish_workflow(
    ctx: ToolContext[WorkflowTools], args: WorkflowIdInput
) -> SuccessOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    await ctx.services.workflows.unpublish(args.workflow_id)
    return SuccessOutput(success=True)


class VersionsInput(WorkflowIdInput):
    limit: int = Field(20, ge=1, le=100)
    skip: int = Field(0, ge=0)


class VersionSummary(ToolModel):
    version_id: str = Field(alias="versionId")
    number: int
    name: str | None
    description: str | None
    authors: str
    created_at: datetime = Field(alias="createdAt")
    autosaved: bool
    is_active: bool = Field(alias="isActive")
    is_current_draft: bool = Field(alias="isCurrentDraft")

    @classmethod
    def of(cls, version: VersionInfo) -> VersionSummary:
        return cls(
            version_id=version.id,
            number=version.number,
            name=version.label,
            description=version.description,
            authors=AUTHOR,
            created_at=version.created_at,
            autosaved=False,
            is_active=version.is_active,
            is_current_draft=version.is_current_draft,
        )


class VersionsOutput(ToolModel):
    versions: list[VersionSummary]


async def list_versions(ctx: ToolContext[WorkflowTools], args: VersionsInput) -> VersionsOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    versions = await ctx.services.workflows.versions(
        args.workflow_id, limit=args.limit, skip=args.skip
    )
    return VersionsOutput(versions=[VersionSummary.of(v) for v in versions])


class VersionInput(WorkflowIdInput):
    version_id: str = Field(alias="versionId", min_length=1)


class VersionOutput(VersionSummary):
    workflow_name: str = Field(alias="workflowName")
    nodes: list[Any]
    connections: dict[str, Any]
    settings: dict[str, Any]


async def get_version(ctx: ToolContext[WorkflowTools], args: VersionInput) -> VersionOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    info, content = await ctx.services.workflows.version(args.workflow_id, args.version_id)
    summary = VersionSummary.of(info).model_dump(by_alias=True)
    return VersionOutput.model_validate(
        summary
        | {
            "workflowName": content["name"],
            "nodes": content["nodes"],
            "connections": content["connections"],
            "settings": content["settings"],
        }
    )


class RestoreOutput(ToolModel):
    success: bool
    version_id: str = Field(alias="versionId", description="The new current draft")


async def restore_version(ctx: ToolContext[WorkflowTools], args: VersionInput) -> RestoreOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    restored = await ctx.services.workflows.restore(args.workflow_id, args.version_id)
    return RestoreOutput(success=True, version_id=restored)


class LabelInput(VersionInput):
    name: str | None = Field(None, max_length=128, description="New name (null clears it)")
    description: str | None = Field(None, max_length=2000)


async def update_version(ctx: ToolContext[WorkflowTools], args: LabelInput) -> SuccessOutput:
    await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    await ctx.services.workflows.label_version(
        args.workflow_id, args.version_id, label=args.name, description=args.description
    )
    return SuccessOutput(success=True)


AUTHOR = "Instance AI"


def _licensed(feature: str) -> Callable[[WorkflowTools], bool]:
    def holds(services: WorkflowTools) -> bool:
        return services.features.enabled(feature)

    return holds


def _version_tool(feature: str, **fields: Any) -> ToolSpec[Any]:
    return ToolSpec(
        group=GROUP,
        services=WorkflowTools,
        condition=_licensed(feature),
        requires=f"INSTANCE_AI_LICENSED_FEATURES including {feature}",
        **fields,
    )


TOOLS += [
    ToolSpec(
        name="delete-workflow",
        description="Archive a workflow (unpublishing it first). Reversible with "
        "unarchive-workflow.",
        group=GROUP,
        services=WorkflowTools,
        input_model=WorkflowIdInput,
        output_model=SuccessOutput,
        handler=delete_workflow,
        hitl_action="deleteWorkflow",
        severity="destructive",
    ),
    ToolSpec(
        name="unarchive-workflow",
        description="Restore an archived workflow without publishing it.",
        group=GROUP,
        services=WorkflowTools,
        input_model=WorkflowIdInput,
        output_model=SuccessOutput,
        handler=unarchive_workflow,
        hitl_action="updateWorkflow",
    ),
    ToolSpec(
        name="publish-workflow",
        description="Publish a version (default: the latest draft) so it runs on its triggers.",
        group=GROUP,
        services=WorkflowTools,
        input_model=PublishInput,
        output_model=PublishOutput,
        handler=publish_workflow,
        hitl_action="publishWorkflow",
    ),
    ToolSpec(
        name="unpublish-workflow",
        description="Stop a workflow running in production; the draft is kept.",
        group=GROUP,
        services=WorkflowTools,
        input_model=WorkflowIdInput,
        output_model=SuccessOutput,
        handler=unpublish_workflow,
        hitl_action="publishWorkflow",
    ),
    _version_tool(
        "workflowHistory",
        name="list-workflow-versions",
        description="A workflow's version history, newest first (metadata only).",
        input_model=VersionsInput,
        output_model=VersionsOutput,
        handler=list_versions,
    ),
    _version_tool(
        "workflowHistory",
        name="get-workflow-version",
        description="One version of a workflow, with its nodes and connections.",
        input_model=VersionInput,
        output_model=VersionOutput,
        handler=get_version,
    ),
    _version_tool(
        "workflowHistory",
        name="restore-workflow-version",
        description="Make an earlier version the current draft again (the history is kept; "
        "the published version does not change).",
        input_model=VersionInput,
        output_model=RestoreOutput,
        handler=restore_version,
        hitl_action="restoreWorkflowVersion",
    ),
    _version_tool(
        "namedVersions",
        name="update-workflow-version",
        description="Name a version or describe it.",
        input_model=LabelInput,
        output_model=SuccessOutput,
        handler=update_version,
    ),
]


class CredentialHint(SetupHint):
    """A recipe for the Simplified Custom Auth credential the user makes during setup."""

    test_url: str | None = Field(
        None,
        alias="testUrl",
        description="a side-effect-free GET of the same service that answers only with valid "
        "credentials (an account or usage endpoint), never one the workflow's nodes call",
    )
    node_name: str | None = Field(
        None,
        alias="nodeName",
        description="only this node's credential (when several nodes use Simplified Custom "
        "Auth for different services)",
    )


class SetupWorkflowInput(WorkflowIdInput):
    credential_hints: list[CredentialHint] | None = Field(
        None,
        alias="credentialHints",
        description="recipes for the httpTemplatedCustomAuth credentials the user makes during "
        "setup, from the provider's documentation: the card pre-fills the template and asks "
        "only for the placeholder values",
    )
    prefer_new_credentials: list[str] | None = Field(
        None,
        alias="preferNewCredentials",
        description='credential types (e.g. ["slackApi"]) the user asked to create anew, or to '
        "replace because the secret is wrong: their cards preselect nothing (existing ones "
        "stay listed). Never a default.",
    )


class SetupOutput(ToolModel):
    completed_nodes: list[str] = Field(alias="completedNodes")
    skipped_nodes: list[str] = Field(alias="skippedNodes")
    failed_nodes: list[dict[str, str]] = Field(alias="failedNodes")


async def setup_workflow(ctx: ToolContext[WorkflowTools], args: SetupWorkflowInput) -> SetupOutput:
    """Walk the person through the workflow's nodes that still need something, one card per
    node (credentials to choose, placeholder values to fill). Each answer is applied as it
    comes, as a new version; the series is this call's answered cards, so it survives a
    restart. Ends with the completed, skipped and failed nodes. Credential recipes
    (`credentialHints`) go on the cards of templated credentials; the types in
    `preferNewCredentials` are asked for anew."""
    workflow = await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    hints = _checked_hints(args.credential_hints or [], workflow.as_json())
    renew = set(args.prefer_new_credentials or [])
    catalog = await ctx.services.catalog.get()
    visible = {c.id: c for c in await ctx.services.credentials.all(sorted(ctx.caller.project_ids))}
    history = []
    if ctx.tool_call_id:
        history = await ctx.services.hitl.answered_for_call(ctx.thread_id, ctx.tool_call_id)
    outcomes: dict[str, str | None] = {}  # node → None (completed), "skipped", or the error
    stop = False
    for position, card in enumerate(history):
        asked = NodeSetup.of_json(card.payload["setupRequests"][0])
        answer = card.answer or {}
        outcome = _outcome(asked, answer, visible)
        outcomes[asked.node_name] = outcome
        stop = stop or not answer.get("approved", True)
        newest = position == len(history) - 1 and ctx.resume is not None
        if newest and outcome is None:
            chosen = (answer.get("nodeCredentials") or {}).get(asked.node_name) or {}
            values = (answer.get("nodeParameters") or {}).get(asked.node_name) or {}
            await ctx.services.builder.apply_credentials(
                workflow,
                {asked.node_name: {k: str(v) for k, v in chosen.items()}},
                {asked.node_name: {p: values[p] for p in asked.parameters}},
                caller=ctx.caller,
            )
    current = await visible_workflow(ctx.services.workflows, ctx.caller, args.workflow_id)
    pending = [
        p
        for p in needed(current.as_json(), catalog, set(visible), renew)
        if p.node_name not in outcomes
    ]
    if pending and not stop:
        if not history:  # the first card: say everything the workflow still needs
            await ctx.services.events.append(
                ctx.thread_id,
                "setup-items",
                {
                    "workflowId": current.id,
                    "items": _setup_items(pending, current.as_json(), hints),
                },
                run_id=ctx.run_id,
                agent_id=ctx.agent_id,
            )
        node = pending[0]
        raise Suspend(
            {
                "inputType": "approval",
                "severity": "info",
                "message": f"Set up {node.node_name} ({len(pending)} node(s) left in "
                f"{current.name})",
                "workflowId": current.id,
                "setupRequests": _setup_requests(
                    node, current.as_json(), catalog, visible, hints, renew
                ),
            }
        )
    skipped = [n for n, o in outcomes.items() if o == "skipped"] + [p.node_name for p in pending]
    return SetupOutput(
        completed_nodes=[n for n, o in outcomes.items() if o is None],
        skipped_nodes=skipped,
        failed_nodes=[
            {"nodeName": n, "error": o} for n, o in outcomes.items() if o not in (None, "skipped")
        ],
    )


def _setup_items(
    pending: list[NodeSetup], workflow: dict[str, Any], hints: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """n8n's `setup-items`: one per credential type (with the nodes that need it and, for a
    templated credential, its recipe), then one per node with parameters left to fill."""
    by_type: dict[str, list[str]] = {}
    for node in pending:
        for kind in node.credential_types:
            by_type.setdefault(kind, []).append(node.node_name)
    credentials = []
    for kind, names in by_type.items():
        item: dict[str, Any] = {
            "id": f"credential:{kind}",
            "kind": "credential",
            "credentialType": kind,
            "nodeBindings": [{"nodeName": name} for name in names],
        }
        hint = _hint_for(kind, names[0], workflow, hints)
        if hint is not None:
            item["setupHint"] = hint
        credentials.append(item)
    parameters = [
        {
            "id": f"parameters:{node.node_name}",
            "kind": "parameters",
            "nodeName": node.node_name,
            "parameterNames": list(node.parameters),
        }
        for node in pending
        if node.parameters
    ]
    return credentials + parameters


def _checked_hints(hints: list[CredentialHint], workflow: dict[str, Any]) -> list[dict[str, Any]]:
    """The recipes as the card carries them, or INVALID_ARGUMENT with every problem."""
    nodes = {str(n.get("name")): n for n in workflow.get("nodes") or []}
    urls = [(n.get("parameters") or {}).get("url") for n in nodes.values()]
    problems = []
    for hint in hints:
        node = nodes.get(hint.node_name or "")
        if hint.node_name is not None and node is None:
            problems.append(f"nodeName {hint.node_name!r} is not a node of the workflow")
        found = service_url((node.get("parameters") or {}).get("url")) if node else None
        for problem in hint_problems(
            hint.model_dump(by_alias=True, exclude_none=True),
            node_urls=urls,
            service_origin=found[1] if found else None,
        ):
            problems.append(f"{hint.node_name}: {problem}" if hint.node_name else problem)
    if problems:
        raise InvalidArgumentError(
            "credentialHints: each recipe must be a secret-free template whose {{markers}} "
            "match its placeholders one to one; fix it (or leave it out) and retry. Problems: "
            + "; ".join(problems)
        )
    return [h.model_dump(by_alias=True, exclude_none=True) for h in hints]


def _hint_for(
    kind: str, node_name: str, workflow: dict[str, Any], hints: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The recipe for a node's templated credential (the node's own, else the general one),
    with the service's host and origin from the node's URL."""
    if kind != TEMPLATED_AUTH:
        return None
    hint = next((h for h in hints if h.get("nodeName") == node_name), None) or next(
        (h for h in hints if not h.get("nodeName")), None
    )
    if hint is None:
        return None
    node: dict[str, Any] = next(
        (n for n in workflow.get("nodes") or [] if n.get("name") == node_name), {}
    )
    found = service_url((node.get("parameters") or {}).get("url"))
    shown = {k: v for k, v in hint.items() if k != "nodeName"}
    return shown | ({"serviceHost": found[0], "serviceOrigin": found[1]} if found else {})


def _setup_requests(
    node: NodeSetup,
    workflow: dict[str, Any],
    catalog: Catalog,
    visible: dict[str, Any],
    hints: list[dict[str, Any]] | None = None,
    renew: set[str] | None = None,
) -> list[dict[str, Any]]:
    """One node's card entries in n8n's shape (`workflowSetupNodeSchema`): one per credential
    type it needs (or one for its parameters alone), each with the node itself; every entry
    also carries this service's own description of the node (`NodeSetup.as_json`), which the
    answered card is read back with. A type asked anew (`renew`) shows no bound credential
    and says `preferNewCredential`; a templated one carries its recipe (`setupHint`)."""
    found = next(n for n in workflow.get("nodes") or [] if n.get("name") == node.node_name)
    shown = {
        "name": node.node_name,
        "type": node.node_type,
        "typeVersion": found.get("typeVersion", 1),
        "parameters": found.get("parameters") or {},
        "position": list(found.get("position") or [0, 0])[:2],
        "id": str(found.get("id") or node.node_name),
    }
    bound = {
        kind: {"id": ref["id"], "name": ref["name"]}
        for kind, ref in (found.get("credentials") or {}).items()
        if isinstance(ref, dict)
        and isinstance(ref.get("id"), str)
        and isinstance(ref.get("name"), str)
    }
    if bound:
        shown["credentials"] = bound
    common = node.as_json() | {
        "node": shown,
        "isTrigger": catalog.is_trigger(node.node_type),
        "needsAction": True,
        **(
            {"parameterIssues": {p: [h or "a value is needed"] for p, h in node.parameters.items()}}
            if node.parameters
            else {}
        ),
    }
    if not node.credential_types:
        return [common | {"credentialNeedsAction": False}]
    renew = renew or set()
    entries = []
    for kind in node.credential_types:
        entry = common | {
            "credentialType": kind,
            "credentialNeedsAction": True,
            "existingCredentials": [
                {"id": c.id, "name": c.name} for c in visible.values() if c.type == kind
            ],
        }
        if kind in renew:
            kept = {k: v for k, v in bound.items() if k != kind}
            entry["node"] = {k: v for k, v in shown.items() if k != "credentials"} | (
                {"credentials": kept} if kept else {}
            )
            entry["preferNewCredential"] = True
        hint = _hint_for(kind, node.node_name, workflow, hints or [])
        if hint is not None:
            entry["setupHint"] = hint
        entries.append(entry)
    return entries


def _outcome(asked: NodeSetup, answer: dict[str, Any], visible: dict[str, Any]) -> str | None:
    """What one answer did to its node: None (completed), "skipped", or why it failed."""
    if not answer.get("approved", True) or asked.node_name in (answer.get("skippedNodes") or []):
        return "skipped"
    chosen = (answer.get("nodeCredentials") or {}).get(asked.node_name) or {}
    values = (answer.get("nodeParameters") or {}).get(asked.node_name) or {}
    return _setup_problem(asked, chosen, values, visible)


def _setup_problem(
    item: NodeSetup, chosen: dict[str, Any], values: dict[str, Any], by_id: dict[str, Any]
) -> str | None:
    for kind in item.credential_types:
        credential = by_id.get(str(chosen.get(kind, "")))
        if credential is None or credential.type != kind:
            return f"needs a {kind} credential (none of that type was given)"
    for path in item.parameters:
        value = values.get(path)
        if value is None or (isinstance(value, str) and not value.strip()):
            return f"needs a value for {path}"
    return None


TOOLS.append(
    ToolSpec(
        name="setup-workflow",
        description="Walk the user through the workflow's nodes that still need credentials "
        "or placeholder values, one card per node, applying each answer as a new version; "
        "reports completed, skipped and failed nodes.",
        group=GROUP,
        services=WorkflowTools,
        input_model=SetupWorkflowInput,
        output_model=SetupOutput,
        handler=setup_workflow,
        may_ask=True,
    )
)
