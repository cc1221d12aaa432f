"""setup-credentials: the credentials a workflow needs, asked for on one card (the
reference's list of requests, with their reasons, names, set-up hints and flow), a type's only
credential taken unasked where that is safe, and a hand-off to the browser tools when a
credential needs a person's login on a vendor's page (`needsBrowserSetup`). It handles
metadata only: secrets are entered by a person and never reach a result or an event."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from server.core.caller import DEFAULT_PROJECT
from server.domain.docs import credential_docs_url
from server.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from server.instance.types import CredentialInfo
from server.pipeline.setup import TEMPLATED_AUTH, hint_problems
from server.tools.credentials import GENERIC_TYPES, GROUP, CredentialTools
from server.tools.scope import visible_credential
from server.tools.spec import Suspend, ToolContext, ToolModel, ToolSpec

__all__ = ["TOOLS"]


class HintTemplate(ToolModel):
    headers: dict[str, str] | None = None
    qs: dict[str, str] | None = None
    body: dict[str, Any] | None = None


class HintPlaceholder(ToolModel):
    name: str = Field(min_length=1, description="the marker's name, as {{name}} in the template")
    title: str = Field(description='the input\'s label, e.g. "API key"')
    info: str | None = Field(
        None, description="one line on the value itself (its format); never where to get it"
    )
    type: Literal["password", "plain"] | None = Field(None, description="default: password")
    optional: bool | None = Field(
        None, description="only when the service documents the value as optional"
    )


class SetupHint(ToolModel):
    """A recipe for a Simplified Custom Auth (httpTemplatedCustomAuth) credential: the user
    only types the placeholder values."""

    template: HintTemplate = Field(
        description="the request's auth parts as the service documents them, with "
        '{{placeholder}} markers for the user\'s values, e.g. {"headers": {"Authorization": '
        '"Key {{api_key}}"}}; never a real secret'
    )
    placeholders: list[HintPlaceholder] = Field(
        min_length=1, description="one per {{marker}} of the template"
    )
    docs_url: str | None = Field(
        None, alias="docsUrl", description="the provider's page where the user gets the secret"
    )
    suggested_name: str | None = Field(
        None, alias="suggestedName", description='the credential\'s name, e.g. "fal.ai API Key"'
    )


class CredentialRequest(ToolModel):
    credential_type: str = Field(
        alias="credentialType",
        min_length=1,
        description='the registered type name, e.g. "slackApi", "gmailOAuth2"',
    )
    reason: str | None = Field(None, description="why it is needed, shown to the user")
    suggested_name: str | None = Field(
        None, alias="suggestedName", description="pre-fills the name of a new credential"
    )
    prefer_new: bool | None = Field(
        None,
        alias="preferNew",
        description="the user asked for a new credential of this type (or a replacement of "
        "one whose secret is wrong): nothing is preselected and the only existing one is not "
        "taken without asking",
    )
    setup_hint: SetupHint | None = Field(
        None, alias="setupHint", description="only for httpTemplatedCustomAuth"
    )


class CredentialFlow(ToolModel):
    stage: Literal["generic", "finalize"]


class SetupInput(ToolModel):
    credentials: list[CredentialRequest] | None = Field(
        None, min_length=1, description="the credentials to set up, all on one card"
    )
    # Shorthand for one type (the single-type call shape).
    credential_type: str | None = Field(
        None, alias="credentialType", min_length=1, description="shorthand for one type"
    )
    reason: str | None = Field(None, description="with credentialType: why it is needed")
    require_user_selection: bool | None = Field(
        None,
        alias="requireUserSelection",
        description="the user asked to choose or create explicitly: the card waits for them "
        "even when exactly one credential of a type exists",
    )
    credential_flow: CredentialFlow | None = Field(
        None,
        alias="credentialFlow",
        description='"finalize": the card after verification ("apply credentials" / later); '
        '"generic": generic HTTP auth',
    )

    @model_validator(mode="after")
    def _one_shape(self) -> SetupInput:
        if (self.credentials is None) == (self.credential_type is None):
            raise ValueError("give credentials (a list) or credentialType (one type), not both")
        return self

    def requests(self) -> list[CredentialRequest]:
        if self.credentials is not None:
            return self.credentials
        assert self.credential_type is not None
        return [CredentialRequest(credential_type=self.credential_type, reason=self.reason)]


class CredentialFieldInfo(ToolModel):
    name: str
    display_name: str | None = Field(None, alias="displayName")
    type: str
    required: bool
    description: str | None = None


class SetupOutput(ToolModel):
    credential_id: str | None = Field(None, alias="credentialId")
    credential_type: str | None = Field(None, alias="credentialType")
    auto_selected: bool | None = Field(None, alias="autoSelected")
    skipped: bool | None = None
    success: bool | None = None
    # Type → the chosen credential's id.
    credentials: dict[str, str] | None = None
    deferred: bool | None = None
    # The person chose to set the credential up in the browser: what that step needs.
    needs_browser_setup: bool | None = Field(None, alias="needsBrowserSetup")
    docs_url: str | None = Field(None, alias="docsUrl")
    required_fields: list[CredentialFieldInfo] | None = Field(None, alias="requiredFields")
    message: str | None = None


async def setup_credentials(ctx: ToolContext[CredentialTools], args: SetupInput) -> SetupOutput:
    """Credentials of one or more types: where each type has exactly one credential (and is
    not generic HTTP auth, nor asked new), it is taken without asking; otherwise one card lists
    every request and the person selects or creates (creating is what createCredential gates:
    blocked, only existing credentials may be chosen), or picks the browser setup, which this
    answers with `needsBrowserSetup` and what the browser step needs."""
    shorthand = args.credential_type is not None
    requests = args.requests()
    kinds = [r.credential_type for r in requests]
    existing = {
        kind: []
        if kind == TEMPLATED_AUTH
        else await ctx.services.credentials.all(sorted(ctx.caller.project_ids), kind)
        for kind in kinds
    }
    may_create = await ctx.services.hitl.mode(ctx.thread_id, "createCredential") != "blocked"
    finalize = args.credential_flow is not None and args.credential_flow.stage == "finalize"
    if ctx.resume is None:
        await _check_requests(ctx, requests)
        keeps_card = finalize or bool(args.require_user_selection)
        auto = {
            r.credential_type: existing[r.credential_type][0].id
            for r in requests
            if not keeps_card
            and not r.prefer_new
            and r.credential_type not in GENERIC_TYPES
            and len(existing[r.credential_type]) == 1
        }
        if len(auto) == len(set(kinds)):
            if shorthand:
                return SetupOutput(
                    credential_id=auto[kinds[0]],
                    credential_type=kinds[0],
                    auto_selected=True,
                    skipped=False,
                )
            return SetupOutput(success=True, credentials=auto, auto_selected=True)
        missing = [k for k in kinds if not existing[k]]
        if missing and not may_create:
            raise FailedPreconditionError(
                f"the user has no {', '.join(missing)} credential and creating credentials is "
                "blocked by the administrator (createCredential: blocked); tell the user, do "
                "not retry"
            )
        raise Suspend(_card(ctx, args, requests, existing, may_create))
    return await _answered(ctx, args, requests, may_create, shorthand)


async def _check_requests(
    ctx: ToolContext[CredentialTools], requests: list[CredentialRequest]
) -> None:
    """Unknown types (with the nearest names) and bad recipes are refused before any card."""
    unknown = []
    if ctx.services.credential_types is not None:
        for kind in dict.fromkeys(r.credential_type for r in requests):
            try:
                await ctx.services.credential_types.check(kind)
            except InvalidArgumentError as exc:
                unknown.append(str(exc).removeprefix("type: "))
    if unknown:
        raise InvalidArgumentError(
            "; ".join(unknown) + ". Type names can differ from credential class names: find "
            "the exact one with search-credential-types, then retry."
        )
    problems = []
    for request in requests:
        if request.setup_hint is None:
            continue
        hint = request.setup_hint.model_dump(by_alias=True, exclude_none=True)
        found = hint_problems(hint)
        if request.credential_type != TEMPLATED_AUTH:
            found.append(f"setupHint is only for {TEMPLATED_AUTH}")
        problems += [f"{request.credential_type}: {p}" for p in found]
    if problems:
        raise InvalidArgumentError(
            "setupHint: each recipe must be a secret-free template whose {{markers}} match its "
            "placeholders one to one; fix it (or leave it out) and retry. Problems: "
            + "; ".join(problems)
        )


def _card(
    ctx: ToolContext[CredentialTools],
    args: SetupInput,
    requests: list[CredentialRequest],
    existing: dict[str, list[CredentialInfo]],
    may_create: bool,
) -> dict[str, Any]:
    """The contract's credential card (`credentialRequests`, one per request)."""
    kinds = list(dict.fromkeys(r.credential_type for r in requests))
    names = ", ".join(kinds)
    if args.credential_flow is not None and args.credential_flow.stage == "finalize":
        message = f"Your workflow is verified. Add credentials to make it production-ready: {names}"
    elif len(kinds) == 1:
        verb = "Select or create" if may_create else "Select"
        message = f"{verb} a {names} credential"
    else:
        message = f"{'Select or create' if may_create else 'Select'} credentials: {names}"
    flow = (
        args.credential_flow.model_dump()
        if args.credential_flow is not None
        # n8n's card flow for generic HTTP auth, whose type alone says little.
        else {"stage": "generic"}
        if all(k in GENERIC_TYPES for k in kinds)
        else None
    )
    card: dict[str, Any] = {
        "inputType": "approval",
        "severity": "info",
        "message": message,
        "credentialRequests": [
            {
                "credentialType": r.credential_type,
                "reason": r.reason or f"The workflow needs a {r.credential_type} credential.",
                "existingCredentials": [
                    {"id": c.id, "name": c.name} for c in existing[r.credential_type]
                ],
                **({"suggestedName": r.suggested_name} if r.suggested_name else {}),
                **({"preferNew": True} if r.prefer_new else {}),
                **(
                    {"setupHint": r.setup_hint.model_dump(by_alias=True, exclude_none=True)}
                    if r.setup_hint is not None
                    else {}
                ),
            }
            for r in requests
        ],
    }
    if ctx.caller.project_id != DEFAULT_PROJECT:
        card["projectId"] = ctx.caller.project_id
    if args.require_user_selection:
        card["requireUserSelection"] = True
    if flow is not None:
        card["credentialFlow"] = flow
    return card


async def _answered(
    ctx: ToolContext[CredentialTools],
    args: SetupInput,
    requests: list[CredentialRequest],
    may_create: bool,
    shorthand: bool,
) -> SetupOutput:
    """The card's answer: skipped, the browser setup chosen, or the credentials chosen (each
    checked: one the caller may use, of the type asked)."""
    assert ctx.resume is not None
    kinds = [r.credential_type for r in requests]
    if not ctx.resume.get("approved"):
        if shorthand:
            return SetupOutput(
                credential_type=kinds[0], auto_selected=False, skipped=True, deferred=True
            )
        return SetupOutput(
            success=True,
            deferred=True,
            skipped=True,
            message="The user skipped credential setup for now: continue without these "
            "credentials; they can be set up later.",
        )
    if ctx.resume.get("kind") == "credentialAutoSetup":
        kind = str(ctx.resume.get("credentialType") or "")
        if kind not in kinds:
            raise InvalidArgumentError(
                f"the browser setup was chosen for {kind!r}, which this card did not ask for "
                f"({', '.join(kinds)})"
            )
        if not may_create:
            raise FailedPreconditionError(
                "creating credentials is blocked by the administrator (createCredential: "
                "blocked), so it cannot be set up in the browser; tell the user"
            )
        docs_url, fields = await _browser_setup_facts(ctx.services, kind)
        return SetupOutput(
            success=False,
            needs_browser_setup=True,
            credential_type=kind,
            docs_url=docs_url,
            required_fields=fields,
            message="The user chose to set this credential up in the browser: load the "
            "credential-setup-with-computer-use skill, then use the browser tools "
            "(browser_capture_secret, browser_create_credential) and call setup-credentials "
            "again to pick the new credential.",
        )
    chosen = {k: str(v) for k, v in (ctx.resume.get("credentials") or {}).items() if v}
    for kind, credential_id in chosen.items():
        if kind not in kinds:
            raise InvalidArgumentError(f"the card did not ask for a {kind} credential")
        info = await visible_credential(ctx.services.credentials, ctx.caller, credential_id)
        if info.type != kind:
            raise NotFoundError(f"credential {credential_id!r} is a {info.type}, not a {kind}")
    if shorthand:
        kind = kinds[0]
        if kind not in chosen:
            return SetupOutput(credential_type=kind, auto_selected=False, skipped=True)
        return SetupOutput(
            credential_id=chosen[kind], credential_type=kind, auto_selected=False, skipped=False
        )
    left = [k for k in dict.fromkeys(kinds) if k not in chosen]
    return SetupOutput(
        success=True,
        credentials=chosen,
        message="The setup card is closed. "
        + (
            f"Nothing was chosen for {', '.join(left)}: ask the user how to go on."
            if left
            else "Every requested credential was chosen."
        ),
    )


async def _browser_setup_facts(
    services: CredentialTools, kind: str
) -> tuple[str | None, list[CredentialFieldInfo] | None]:
    """The type's documentation page and its fields (with the fields of the types it
    extends; hidden ones left out): the catalog's, else the instance's own schema."""
    try:
        catalog = await services.catalog.get()
    except UnavailableError:
        catalog = None
    found = catalog.credentials.get(kind) if catalog is not None else None
    if catalog is not None and found is not None:
        fields: list[CredentialFieldInfo] = []
        seen: set[str] = set()
        chain, position = [kind], 0
        while position < len(chain):
            current = catalog.credentials.get(chain[position])
            position += 1
            if current is None:
                continue
            chain += [e for e in current.extends if e not in chain]
            for prop in current.properties:
                name = str(prop.get("name", ""))
                if not name or prop.get("type") in ("hidden", "notice") or name in seen:
                    continue
                seen.add(name)
                fields.append(
                    CredentialFieldInfo(
                        name=name,
                        display_name=prop.get("displayName"),
                        type=str(prop.get("type", "string")),
                        required=bool(prop.get("required", False)),
                        description=prop.get("description") or None,
                    )
                )
        return credential_docs_url(found, services.docs_origin), fields
    schema = None
    if services.credential_types is not None and services.credential_types.instance_types:
        schema = await services.credential_types.instance_types.schema(kind)
    if schema is None:
        return None, None
    return None, [
        CredentialFieldInfo(name=f.name, type=f.type, required=f.required) for f in schema.fields
    ]


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="setup-credentials",
        description="Get credentials for the workflow: `credentials` lists each type (with "
        "reason, suggestedName, preferNew, and setupHint for httpTemplatedCustomAuth), or "
        "`credentialType` names one. A type's only existing credential is used directly "
        "(never for generic HTTP auth, preferNew or requireUserSelection); otherwise one card "
        "asks the user to pick or create them all. Any result means the card is closed. When "
        "the result says needsBrowserSetup=true, load credential-setup-with-computer-use and "
        "use the browser tools (browser_capture_secret, browser_create_credential). You never "
        "see or handle secrets.",
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
