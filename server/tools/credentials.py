"""Credential tools. They handle metadata only: secrets are entered by a person (through
`Credentials.CreateCredential`, behind a UI card) and never reach a result or an event."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import Field

from server.catalog import CatalogService
from server.domain.credential_tester import CredentialTester
from server.domain.web import HostNotApproved
from server.errors import FailedPreconditionError, NotFoundError
from server.instance import CredentialChecks, Credentials, CredentialSecrets, Workflows
from server.instance.types import CredentialInfo
from server.runtime.hitl import Hitl
from server.tools.scope import revealed, visible_credential
from server.tools.spec import Suspend, ToolContext, ToolModel, ToolSpec
from server.tools.web import host_approvals, host_card

__all__ = ["GROUP", "TOOLS", "CredentialTools"]

GROUP = "credentials"

# HTTP auth types that fit any service: never chosen for the user without asking.
GENERIC_TYPES = frozenset(
    {
        "httpHeaderAuth",
        "httpBearerAuth",
        "httpQueryAuth",
        "httpBasicAuth",
        "httpDigestAuth",
        "httpCustomAuth",
        "httpTemplatedCustomAuth",
        "oAuth1Api",
        "oAuth2Api",
    }
)


@dataclass(frozen=True, kw_only=True)
class CredentialTools:
    """What the credential tools may touch: metadata, and secrets only to test them."""

    credentials: Credentials
    secrets: CredentialSecrets | None
    checks: CredentialChecks | None
    workflows: Workflows
    catalog: CatalogService
    tester: CredentialTester
    hitl: Hitl


class CredentialModel(ToolModel):
    id: str
    name: str
    type: str
    created_at: datetime = Field(alias="createdAt")
    updated_at: datetime = Field(alias="updatedAt")

    @classmethod
    def of(cls, info: CredentialInfo) -> CredentialModel:
        return cls(
            id=info.id,
            name=info.name,
            type=info.type,
            created_at=info.created_at,
            updated_at=info.updated_at,
        )


class ListInput(ToolModel):
    type: str | None = Field(None, description="Only this credential type, e.g. slackApi")


class ListOutput(ToolModel):
    credentials: list[CredentialModel]


async def list_credentials(ctx: ToolContext[CredentialTools], args: ListInput) -> ListOutput:
    found = await ctx.services.credentials.all(sorted(ctx.caller.project_ids), args.type)
    return ListOutput(credentials=[CredentialModel.of(c) for c in found])


class CredentialIdInput(ToolModel):
    credential_id: str = Field(alias="credentialId", min_length=1)


class NodeAccess(ToolModel):
    workflow_id: str = Field(alias="workflowId")
    workflow_name: str = Field(alias="workflowName")
    node_name: str = Field(alias="nodeName")


class GetOutput(CredentialModel):
    nodes_with_access: list[NodeAccess] = Field(alias="nodesWithAccess")


async def get_credential(ctx: ToolContext[CredentialTools], args: CredentialIdInput) -> GetOutput:
    info = await visible_credential(ctx.services.credentials, ctx.caller, args.credential_id)
    users = []
    for row in await ctx.services.workflows.listing(limit=1000, status="all", caller=ctx.caller):
        workflow = await ctx.services.workflows.get(row.id)
        for node in workflow.nodes if workflow else []:
            slots = node.get("credentials") or {}
            if any(isinstance(s, dict) and s.get("id") == info.id for s in slots.values()):
                users.append(
                    NodeAccess(workflow_id=row.id, workflow_name=row.name, node_name=node["name"])
                )
    base = CredentialModel.of(info).model_dump(by_alias=True)
    return GetOutput.model_validate(
        base | {"nodesWithAccess": [u.model_dump(by_alias=True) for u in users]}
    )


class SuccessOutput(ToolModel):
    success: bool


async def delete_credential(
    ctx: ToolContext[CredentialTools], args: CredentialIdInput
) -> SuccessOutput:
    await visible_credential(ctx.services.credentials, ctx.caller, args.credential_id)
    await ctx.services.credentials.delete(args.credential_id)
    return SuccessOutput(success=True)


class SetupInput(ToolModel):
    credential_type: str = Field(alias="credentialType", min_length=1)
    reason: str | None = Field(None, description="Why it is needed, shown to the user")


class SetupOutput(ToolModel):
    credential_id: str | None = Field(None, alias="credentialId")
    credential_type: str = Field(alias="credentialType")
    auto_selected: bool = Field(False, alias="autoSelected")
    skipped: bool = False


async def setup_credentials(ctx: ToolContext[CredentialTools], args: SetupInput) -> SetupOutput:
    """Pick a credential of a type: the only one there is (unless the type is generic HTTP
    auth), or the one the person selects or creates in the card (creating one is what
    createCredential gates: blocked, only existing credentials may be chosen)."""
    kind = args.credential_type
    existing = await ctx.services.credentials.all(sorted(ctx.caller.project_ids), kind)
    may_create = await ctx.services.hitl.mode(ctx.thread_id, "createCredential") != "blocked"
    if ctx.resume is None:
        if len(existing) == 1 and kind not in GENERIC_TYPES:
            return SetupOutput(
                credential_id=existing[0].id, credential_type=kind, auto_selected=True
            )
        if not existing and not may_create:
            raise FailedPreconditionError(
                f"the user has no {kind} credential and creating credentials is blocked by "
                "the administrator (createCredential: blocked); tell the user, do not retry"
            )
        raise Suspend(
            {
                "inputType": "approval",
                "severity": "info",
                "message": f"Choose or create a {kind} credential"
                if may_create
                else f"Choose a {kind} credential",
                "credentialRequests": [
                    {
                        "credentialType": kind,
                        "reason": args.reason or f"The workflow needs a {kind} credential.",
                        "existingCredentials": [{"id": c.id, "name": c.name} for c in existing],
                    }
                ],
                # n8n's card flow for generic HTTP auth, whose type alone says little.
                **({"credentialFlow": {"stage": "generic"}} if kind in GENERIC_TYPES else {}),
            }
        )
    chosen = (ctx.resume.get("credentials") or {}).get(kind)
    if not ctx.resume.get("approved") or not chosen:
        return SetupOutput(credential_type=kind, skipped=True)
    info = await visible_credential(ctx.services.credentials, ctx.caller, str(chosen))
    if info.type != kind:
        raise NotFoundError(f"credential {chosen!r} is a {info.type}, not a {kind}")
    return SetupOutput(credential_id=info.id, credential_type=kind)


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="list-credentials",
        description="List credentials (metadata only; secrets are never shown).",
        group=GROUP,
        services=CredentialTools,
        input_model=ListInput,
        output_model=ListOutput,
        handler=list_credentials,
    ),
    ToolSpec(
        name="get-credential",
        description="A credential's metadata and the workflow nodes that use it.",
        group=GROUP,
        services=CredentialTools,
        input_model=CredentialIdInput,
        output_model=GetOutput,
        handler=get_credential,
    ),
    ToolSpec(
        name="delete-credential",
        description="Delete a credential permanently (irreversible).",
        group=GROUP,
        services=CredentialTools,
        input_model=CredentialIdInput,
        output_model=SuccessOutput,
        handler=delete_credential,
        hitl_action="deleteCredential",
        severity="destructive",
    ),
    ToolSpec(
        name="setup-credentials",
        description="Get a credential of a type for the workflow: the only existing one is "
        "used directly (generic HTTP auth types always ask); otherwise the user picks or "
        "creates one in a card. You never see or handle secrets.",
        group=GROUP,
        services=CredentialTools,
        input_model=SetupInput,
        output_model=SetupOutput,
        handler=setup_credentials,
        may_ask=True,
        hitl_action="createCredential",
        self_gated=True,
    ),
]


class TestOutput(ToolModel):
    success: bool
    message: str


async def test_credential(ctx: ToolContext[CredentialTools], args: CredentialIdInput) -> TestOutput:
    info = await visible_credential(ctx.services.credentials, ctx.caller, args.credential_id)
    if ctx.services.checks is not None:  # the instance keeps the secret: it tests it
        success, message = await ctx.services.checks.test(info.id)
        return TestOutput(success=success, message=message)
    catalog = await ctx.services.catalog.get()
    kind = catalog.credentials.get(info.type)
    if kind is None:
        return TestOutput(
            success=False, message=f"credential type {info.type} is not in the catalog"
        )
    data = await revealed(ctx.services.secrets, info)
    authorize = await host_approvals(
        ctx.services.hitl, ctx, TEST_SPEC, "testing the credential against"
    )
    try:
        outcome = await ctx.services.tester.test(kind, data, authorize=authorize)
    except HostNotApproved as needed:
        raise host_card(needed, "testing the credential against") from None
    return TestOutput(success=outcome.success, message=outcome.message)


TEST_SPEC = ToolSpec(
    name="test-credential",
    description="Check that a credential works by sending its type's test request (only to "
    "public addresses the user approved). Says clearly when the type declares no test.",
    group=GROUP,
    services=CredentialTools,
    input_model=CredentialIdInput,
    output_model=TestOutput,
    handler=test_credential,
    hitl_action="fetchUrl",
    self_gated=True,
    may_ask=True,
)
TOOLS.append(TEST_SPEC)
