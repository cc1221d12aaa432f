"""Credential tools. They handle metadata only: secrets are entered by a person (through
`Credentials.CreateCredential`, behind a UI card) and never reach a result or an event."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import Field

from server.catalog import CatalogService
from server.domain.credential_tester import CredentialTester
from server.domain.docs import DOCS_ORIGIN
from server.domain.web import HostNotApproved
from server.instance import CredentialChecks, Credentials, CredentialSecrets, Workflows
from server.instance.types import CredentialInfo
from server.pipeline.credential_types import CredentialTypeIndex
from server.runtime.hitl import Hitl
from server.tools.scope import revealed, visible_credential
from server.tools.spec import ToolContext, ToolModel, ToolSpec
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
    # Unknown types refused before a card; a type's fields for the browser setup.
    credential_types: CredentialTypeIndex | None = None
    # Where the docs a browser setup starts from live (INSTANCE_AI_DOCS_URL).
    docs_origin: str = DOCS_ORIGIN


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
