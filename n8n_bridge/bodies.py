"""The request bodies of n8n's assistant routes (the DTOs of `@n8n/api-types` 1.41.0), checked
as n8n checks them: unknown keys dropped, and a refusal as n8n's validation layer words it
(a 400 with the first issue: its code, path and message)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request

from n8n_bridge.answers import BridgeHttpError

__all__ = [
    "THREAD_SOURCES",
    "ChatBody",
    "ConfirmBody",
    "CorrectBody",
    "FeedbackBody",
    "FileAttachment",
    "RenameBody",
    "ThreadBody",
    "parse",
    "query_int",
]

THREAD_SOURCES = (
    "website-template",
    "template-view",
    "canvas_action_button",
    "canvas_choice_prompt",
    "node_error_view",
    "credential_edit",
    "credentials_list",
    "agent_builder_page",
    "agent_preview",
    "assistant_page",
    "workflow_list_auto",
    "workflow_list_button",
    "evals",
    "playwright",
)
CONFIRM_KINDS = (
    "approval",
    "questions",
    "credentialSelection",
    "credentialAutoSetup",
    "credentialDestination",
    "domainAccessApprove",
    "domainAccessDeny",
    "planDeny",
    "resourceDecision",
    "setupWorkflowApply",
    "setupWorkflowTestTrigger",
    "mcpConnect",
)
_ATTACHMENT_LIMIT = 10 * 1024 * 1024  # base64 characters, as n8n's schema counts them


class _Dto(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FileAttachment(_Dto):
    type: Literal["file"]
    data: str = Field(max_length=_ATTACHMENT_LIMIT)
    mimeType: str = Field(max_length=100)
    fileName: str = Field(max_length=300)

    def decoded(self) -> bytes:
        try:
            return base64.b64decode(self.data, validate=True)
        except (binascii.Error, ValueError):
            raise BridgeHttpError(400, f"Attachment {self.fileName} is not base64") from None


class ReferenceAttachment(_Dto):
    """A workflow, agent or node selection the person pointed at (not a file)."""

    type: Literal["workflow", "agent", "nodes"]
    id: str | None = None
    workflowId: str | None = None
    name: str | None = None


class ChatBody(_Dto):
    message: str = ""
    attachments: (
        list[Annotated[FileAttachment | ReferenceAttachment, Field(discriminator="type")]] | None
    ) = Field(default=None, max_length=10)
    timeZone: str | None = None
    pushRef: str | None = None


class ThreadBody(_Dto):
    threadId: str | None = Field(default=None, pattern=r"^[0-9a-fA-F-]{36}$")
    projectId: str = Field(min_length=1)
    source: Literal[THREAD_SOURCES]  # type: ignore[valid-type]
    origin: Literal["internal", "external"] | None = None
    sourceContext: dict[str, Any] | None = None

    @field_validator("sourceContext")
    @classmethod
    def _small(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value)) > 2048:
            raise ValueError("sourceContext exceeds the maximum allowed size")
        return value


class RenameBody(_Dto):
    title: str | None = Field(default=None, min_length=1, max_length=255)
    metadata: dict[str, Any] | None = None

    @field_validator("title", mode="before")
    @classmethod
    def _trimmed(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value


class CorrectBody(_Dto):
    message: str = Field(min_length=1)


class FeedbackBody(_Dto):
    rating: Literal["up", "down"]
    comment: str | None = Field(default=None, max_length=10_000)


class ConfirmBody(_Dto):
    """Checked for its kind here; the service checks the rest of the answer."""

    model_config = ConfigDict(extra="allow")
    kind: str

    @field_validator("kind")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in CONFIRM_KINDS:
            expected = " | ".join(f"'{k}'" for k in CONFIRM_KINDS)
            raise ValueError(f"Invalid discriminator value. Expected {expected}")
        return value


Body = TypeVar("Body", bound=BaseModel)


async def parse(request: Request, model: type[Body]) -> Body:
    """The body as `model`; a 400 shaped like n8n's (its first issue) otherwise."""
    raw = await request.body()
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise BridgeHttpError(422, "Failed to parse request body") from None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise BridgeHttpError(400, _first_issue(exc)) from None


def _first_issue(exc: ValidationError) -> str:
    issue = exc.errors()[0]
    message = str(issue["msg"]).removeprefix("Value error, ")
    path = ".".join(str(p) for p in issue["loc"])
    return f"{path}: {message}" if path else message


def query_int(request: Request, name: str, *, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise BridgeHttpError(400, f"{name}: expected an integer from {low} to {high}")
    return int(raw)
