"""Secrets on a page into an n8n credential, without the model ever seeing them:
`browser_capture_secret` reads a value an element shows (or a redaction marker stood for)
straight into a pending credential held in this process (`CapturedSecrets`), and
`browser_create_credential` makes the credential from those fields and plain ones, after the
person approves it (`createCredential`) on a card that names the fields, never their values.
The browser tools' own plumbing (the driver, errors, redaction) is `browser.py`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from browser_relay.target import Target
from server.errors import (
    FailedPreconditionError,
    InstanceAIError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from server.runtime.captured_secrets import CapturedSecrets, has_marker
from server.runtime.hitl import Hitl
from server.tools.browser import (
    BROWSER_EXTRA,
    GROUP,
    BrowserTools,
    OnPage,
    browser_tool,
    driver_installed,
)
from server.tools.spec import Suspend, ToolContext, ToolModel, ToolSpec

if TYPE_CHECKING:
    from browser_relay.driver import BrowserDriver

__all__ = ["TOOLS"]

CREATE_CREDENTIAL = "createCredential"
# Reads what an element holds: an input's value, else its text.
READ_VALUE = (
    "e => (e instanceof HTMLInputElement || e instanceof HTMLTextAreaElement || "
    "e instanceof HTMLSelectElement) ? e.value : (e.innerText || e.textContent || '')"
)


class CaptureTarget(ToolModel):
    ref: str | None = Field(None, description="ref of the element holding the value, e.g. e12")
    selector: str | None = Field(None, description="or a CSS / Playwright selector")
    redacted_key: str | None = Field(
        None,
        alias="redactedKey",
        description="or the marker a snapshot showed in place of the secret, e.g. "
        '"[REDACTED:openai_api_key:1]"',
    )

    @model_validator(mode="after")
    def _one(self) -> CaptureTarget:
        given = [v for v in (self.ref, self.selector, self.redacted_key) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of ref, selector or redactedKey")
        return self


class CaptureInput(OnPage):
    credentials_key: str = Field(
        alias="credentialsKey",
        min_length=1,
        max_length=100,
        description='groups the fields of one credential, e.g. "openai-setup"',
    )
    field_name: str = Field(
        alias="field",
        min_length=1,
        max_length=100,
        description='the name to keep the value under, e.g. "apiKey" (used in resolveData)',
    )
    element: CaptureTarget


class CaptureOutput(ToolModel):
    ok: bool
    credentials_key: str = Field(alias="credentialsKey")
    fields_captured: list[str] = Field(alias="fieldsCaptured")
    # Every field captured so far under the key (names only).
    pending_fields: list[str] = Field(alias="pendingFields")
    length: int = Field(description="characters captured (the value itself is never shown)")


async def capture_secret(
    d: BrowserDriver, a: CaptureInput, ctx: ToolContext[BrowserTools]
) -> CaptureOutput:
    """The value an element holds (or a marker stood for) goes into the thread's pending
    credential; the result names the field and its length, never the value."""
    secrets, element = ctx.services.secrets, a.element
    if element.redacted_key is not None:
        found = secrets.value_of(ctx.thread_id, element.redacted_key)
        if found is None:
            raise FailedPreconditionError(
                f"the marker {element.redacted_key!r} was not shown in this conversation; take "
                "a fresh browser_snapshot and use a marker from it, or the ref of the element "
                "holding the value"
            )
        value = found
    else:
        target = Target(ref=element.ref, selector=element.selector)
        read = await d.locate(target, a.page_id).evaluate(READ_VALUE, timeout=10_000)
        value = str(read or "").strip()
    if not value:
        raise FailedPreconditionError(
            f'the element for "{a.field_name}" holds no value; take a fresh browser_snapshot '
            "and capture the element that shows the secret"
        )
    if has_marker(value):
        raise FailedPreconditionError(
            f'what the element for "{a.field_name}" holds is a redaction marker, not the '
            "secret; capture the element that holds the value itself"
        )
    fields = secrets.capture(ctx.thread_id, a.credentials_key, a.field_name, value)
    return CaptureOutput(
        ok=True,
        credentials_key=a.credentials_key,
        fields_captured=[a.field_name],
        pending_fields=fields,
        length=len(value),
    )


class CreateCredentialInput(ToolModel):
    credentials_key: str = Field(
        alias="credentialsKey", min_length=1, description="the key the fields were captured under"
    )
    type: str = Field(min_length=1, description='n8n credential type, e.g. "openAiApi"')
    name: str = Field(min_length=1, max_length=128, description="display name of the credential")
    data: dict[str, Any] | None = Field(
        None, description="literal fields that are not secret (may be nested)"
    )
    resolve_data: dict[str, Any] | None = Field(
        None,
        alias="resolveData",
        description="the same nested shape as data, each leaf the name of a captured field "
        '(e.g. {"apiKey": "apiKey"}); every leaf must have been captured',
    )
    project_id: str | None = Field(None, alias="projectId")
    clear: bool = Field(True, description="forget the captured fields once created")


class CreateCredentialOutput(ToolModel):
    ok: bool
    credential_id: str = Field(alias="credentialId")
    credential_name: str = Field(alias="credentialName")
    credential_type: str = Field(alias="credentialType")


async def create_credential(
    ctx: ToolContext[BrowserTools], args: CreateCredentialInput
) -> CreateCredentialOutput:
    """The credential from the captured fields (`resolveData`) and the plain ones (`data`),
    once the person approves a card naming it and its fields (createCredential)."""
    services, thread = ctx.services, ctx.thread_id
    if services.credentials is None or services.hitl is None:
        raise UnavailableError("creating credentials from the browser is not set up here")
    data = _credential_data(services.secrets, thread, args)
    if services.credential_types is not None:
        await services.credential_types.check(args.type)
    project = args.project_id or ctx.caller.project_id
    if not ctx.caller.sees(project):
        raise NotFoundError(f"project {project!r} does not exist")
    await _approved_to_create(ctx, services.hitl, args)
    try:
        created = await services.credentials.create(
            project_id=project, name=args.name, type_name=args.type, data=data
        )
    except InstanceAIError as exc:
        raise _scrubbed(exc, services.secrets.scrub_text(thread, str(exc))) from None
    if args.clear:
        services.secrets.clear(thread, args.credentials_key)
    return CreateCredentialOutput(
        ok=True, credential_id=created.id, credential_name=created.name, credential_type=args.type
    )


def _credential_data(
    secrets: CapturedSecrets, thread_id: str, args: CreateCredentialInput
) -> dict[str, Any]:
    """The credential's data: `data` with `resolveData`'s leaves (captured field names)
    replaced by the captured values."""
    captured = secrets.fields(thread_id, args.credentials_key)
    if not captured:
        raise FailedPreconditionError(
            f'no fields were captured under credentialsKey "{args.credentials_key}" (or they '
            "expired); call browser_capture_secret first"
        )
    plain = args.data or {}
    marked = [path for path, leaf in _leaves(plain) if isinstance(leaf, str) and has_marker(leaf)]
    if marked:
        raise InvalidArgumentError(
            f"data: {', '.join(marked)} hold a redaction marker; capture the secret with "
            "browser_capture_secret and name the field in resolveData instead"
        )
    data = _merge(plain, _resolve(args.resolve_data or {}, captured))
    if not data:
        raise InvalidArgumentError("give the credential's fields in resolveData and data")
    return data


async def _approved_to_create(
    ctx: ToolContext[BrowserTools], hitl: Hitl, args: CreateCredentialInput
) -> None:
    """createCredential: blocked refuses, require_approval asks with the card (once, or for
    the rest of the thread when the person allows it for the session)."""
    mode = await hitl.mode(ctx.thread_id, CREATE_CREDENTIAL)
    if mode == "blocked":
        raise FailedPreconditionError(
            "creating credentials is blocked on this server (createCredential: blocked); tell "
            "the user, do not retry"
        )
    if mode != "require_approval":
        return
    if ctx.resume is None:
        raise Suspend(_create_card(args, args.data or {}, args.resolve_data or {}))
    if not ctx.resume.get("approved"):
        said = ctx.resume.get("userInput")
        raise FailedPreconditionError(
            "The user denied creating the credential; do not retry it in this turn."
            + (f" They said: {said}" if said else "")
        )
    if ctx.resume.get("scope") == "session":
        await hitl.always_allow(ctx.thread_id, CREATE_CREDENTIAL)


def _create_card(
    args: CreateCredentialInput, plain: dict[str, Any], resolve: dict[str, Any]
) -> dict[str, Any]:
    """The reference's resource-decision card: which credential, and the names of its
    fields; no value, captured or plain, is on it (`args` replaces the call's arguments)."""
    description = f'Create credential "{args.name}" ({args.type})'
    captured = [path for path, _ in _leaves(resolve)]
    literal = [path for path, _ in _leaves(plain)]
    return {
        "inputType": "resource-decision",
        "severity": "warning",
        "message": f"browser_create_credential: {description}",
        "resourceName": args.name,
        "resourceDecision": {
            "toolGroup": GROUP,
            "resource": "credentials",
            "description": description
            + (f" with captured {', '.join(captured)}" if captured else "")
            + (f" and {', '.join(literal)}" if literal else ""),
            "options": ["denyOnce", "allowOnce", "allowForSession"],
        },
        "args": {
            "credentialsKey": args.credentials_key,
            "type": args.type,
            "name": args.name,
            "capturedFields": captured,
            "plainFields": literal,
            **({"projectId": args.project_id} if args.project_id else {}),
        },
    }


def _leaves(value: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, leaf) of a nested object."""
    found: list[tuple[str, Any]] = []
    for key, sub in value.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(sub, dict) and sub:
            found += _leaves(sub, path)
        else:
            found.append((path, sub))
    return found


def _resolve(shape: dict[str, Any], captured: dict[str, str]) -> dict[str, Any]:
    """`shape` with each leaf (a captured field's name) replaced by the captured value."""
    out: dict[str, Any] = {}
    for key, leaf in shape.items():
        if isinstance(leaf, dict):
            out[key] = _resolve(leaf, captured)
        elif not isinstance(leaf, str):
            raise InvalidArgumentError(
                f"resolveData.{key}: each leaf names a captured field (a string), not "
                f"{type(leaf).__name__}"
            )
        elif leaf not in captured:
            raise InvalidArgumentError(
                f'resolveData.{key} names field "{leaf}", which was not captured (captured: '
                f"{', '.join(sorted(captured))}); call browser_capture_secret with "
                f'field="{leaf}" first'
            )
        else:
            out[key] = captured[leaf]
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _scrubbed(exc: InstanceAIError, message: str) -> InstanceAIError:
    try:
        return type(exc)(message)
    except TypeError:  # an error kind with more to it than a message
        return FailedPreconditionError(message)


TOOLS: list[ToolSpec[Any]] = [
    browser_tool(
        "browser_capture_secret",
        "Read a secret an element shows (ref or selector from browser_snapshot, or the "
        "redactedKey marker a snapshot showed instead of it) into a pending credential under "
        "credentialsKey/field. The value is never returned to you; browser_create_credential "
        "makes the credential from it. Take a fresh browser_snapshot before capturing.",
        CaptureInput,
        CaptureOutput,
        capture_secret,
        with_context=True,
    ),
    ToolSpec(
        name="browser_create_credential",
        description="Make an n8n credential from fields captured with browser_capture_secret "
        "(resolveData: the same shape as the credential's data, each leaf a captured field's "
        "name) and literal non-secret fields (data). The user approves it on a card "
        "(createCredential). The captured fields are forgotten after success unless "
        "clear=false.",
        group=GROUP,
        services=BrowserTools,
        input_model=CreateCredentialInput,
        output_model=CreateCredentialOutput,
        handler=create_credential,
        hitl_action=CREATE_CREDENTIAL,
        self_gated=True,
        may_ask=True,
        severity="warning",
        condition=driver_installed,
        requires=BROWSER_EXTRA,
    ),
]
