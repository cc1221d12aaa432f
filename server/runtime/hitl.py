"""Human in the loop: confirmation requests of suspended runs, their answers, and the
per-action permission modes (`require_approval | always_allow | blocked`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from sqlalchemy import insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from server.core.ids import new_id
from server.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from server.runtime.events import EventLog
from server.settings import PermissionMode
from server.store import Database
from server.store.models import ConfirmationRow, PermissionRow
from server.store.threads import ensure_threads

__all__ = [
    "ANY_HOST",
    "DENIED_BY_TIMEOUT",
    "Approval",
    "Confirmation",
    "CredentialAutoSetup",
    "CredentialSelection",
    "DomainAccessApprove",
    "DomainAccessDeny",
    "Hitl",
    "McpConnect",
    "PlanDeny",
    "QuestionAnswer",
    "Questions",
    "ResourceDecision",
    "Resume",
    "SetupWorkflowApply",
    "SetupWorkflowTestTrigger",
    "domain_action",
    "parse_resume",
]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Approval(_Answer):
    kind: Literal["approval"]
    approved: bool
    userInput: str | None = None
    scope: Literal["once", "session"] | None = None


class QuestionAnswer(_Answer):
    questionId: str
    selectedOptions: list[str] = Field(default_factory=list)
    customText: str | None = None
    skipped: bool = False


class Questions(_Answer):
    kind: Literal["questions"]
    answers: list[QuestionAnswer]


class CredentialSelection(_Answer):
    kind: Literal["credentialSelection"]
    credentials: dict[str, str]


class CredentialAutoSetup(_Answer):
    kind: Literal["credentialAutoSetup"]
    credentialType: str
    attemptId: str | None = None


class DomainAccessApprove(_Answer):
    kind: Literal["domainAccessApprove"]
    domainAccessAction: Literal["allow_once", "allow_domain", "allow_all"]


class DomainAccessDeny(_Answer):
    kind: Literal["domainAccessDeny"]


class PlanDeny(_Answer):
    kind: Literal["planDeny"]


class ResourceDecision(_Answer):
    kind: Literal["resourceDecision"]
    resourceDecision: Literal["denyOnce", "allowOnce", "allowForSession"]


class SetupWorkflowApply(_Answer):
    kind: Literal["setupWorkflowApply"]
    nodeCredentials: dict[str, Any] | None = None
    nodeParameters: dict[str, Any] | None = None
    skippedNodes: list[str] | None = None


class SetupWorkflowTestTrigger(_Answer):
    kind: Literal["setupWorkflowTestTrigger"]
    testTriggerNode: str


class McpConnect(_Answer):
    kind: Literal["mcpConnect"]
    approved: bool


Resume = Annotated[
    Approval
    | Questions
    | CredentialSelection
    | CredentialAutoSetup
    | DomainAccessApprove
    | DomainAccessDeny
    | PlanDeny
    | ResourceDecision
    | SetupWorkflowApply
    | SetupWorkflowTestTrigger
    | McpConnect,
    Field(discriminator="kind"),
]
_RESUME = TypeAdapter(Resume)


def parse_resume(value: dict[str, Any]) -> dict[str, Any]:
    """The answer validated by its `kind`, then flattened into one object a tool reads
    (`approved` always set; the kind's own fields beside it)."""
    try:
        answer = _RESUME.validate_python(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'resume'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidArgumentError(
            f"resume: {problems} (kinds: approval, questions, credentialSelection, "
            "credentialAutoSetup, domainAccessApprove, domainAccessDeny, planDeny, "
            "resourceDecision, setupWorkflowApply, setupWorkflowTestTrigger, mcpConnect)"
        ) from None
    flat = answer.model_dump(exclude_none=True)
    if isinstance(answer, Approval | McpConnect):
        return flat
    if isinstance(answer, PlanDeny | DomainAccessDeny):
        return flat | {"approved": False, "denied": True}
    if isinstance(answer, ResourceDecision):
        allowed = answer.resourceDecision != "denyOnce"
        scope = "session" if answer.resourceDecision == "allowForSession" else "once"
        return flat | {"approved": allowed, "scope": scope}
    return flat | {"approved": True}


ANY_HOST = "*"


def domain_action(host: str) -> str:
    """The permission row naming an approved host (hashed: host names outgrow the column)."""
    if host == ANY_HOST:
        return "domain:*"
    return "domain:" + hashlib.sha256(host.encode()).hexdigest()[:40]


DENIED_BY_TIMEOUT = {"kind": "approval", "approved": False, "userInput": "(no answer in time)"}


@dataclass(frozen=True, kw_only=True)
class Confirmation:
    request_id: str
    thread_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    payload: dict[str, Any]
    status: str
    answer: dict[str, Any] | None
    created_at: datetime

    @classmethod
    def of(cls, row: ConfirmationRow) -> Confirmation:
        return cls(
            request_id=row.request_id,
            thread_id=row.thread_id,
            run_id=row.run_id,
            tool_call_id=row.tool_call_id,
            tool_name=row.tool_name,
            payload=row.payload,
            status=row.status,
            answer=row.answer,
            created_at=row.created_at,
        )


@dataclass(kw_only=True)
class Hitl:
    db: Database
    events: EventLog
    # Configured modes by action (INSTANCE_AI_PERMISSIONS); unlisted actions need approval.
    modes: dict[str, PermissionMode] = field(default_factory=dict)

    async def request(
        self,
        *,
        thread_id: str,
        run_id: str,
        agent_id: str,
        tool_call_id: str,
        tool_name: str,
        args: dict[str, Any],
        question: dict[str, Any],
    ) -> Confirmation:
        """Persist a confirmation request (not yet shown: see `publish`)."""
        request_id = new_id("req")
        payload = {
            "requestId": request_id,
            "toolCallId": tool_call_id,
            "toolName": tool_name,
            "args": args,
            "severity": "warning",
            "inputType": "approval",
        } | question
        now = datetime.now(UTC)
        async with self.db.engine.begin() as conn:
            await conn.execute(
                insert(ConfirmationRow).values(
                    request_id=request_id,
                    thread_id=thread_id,
                    run_id=run_id,
                    tool_call_id=tool_call_id,
                    tool_name=tool_name,
                    payload=payload,
                    status="pending",
                    created_at=now,
                )
            )
        return await self.get(request_id)

    async def publish(self, confirmation: Confirmation, *, agent_id: str) -> None:
        """Show the card: `confirmation-request`, once the run is recorded as waiting."""
        await self.events.append(
            confirmation.thread_id,
            "confirmation-request",
            confirmation.payload,
            run_id=confirmation.run_id,
            agent_id=agent_id,
        )

    async def get(self, request_id: str) -> Confirmation:
        async with self.db.session() as session:
            row = await session.get(ConfirmationRow, request_id)
            if row is None:
                raise NotFoundError(f"there is no confirmation request {request_id!r}")
            return Confirmation.of(row)

    async def answered_for_call(self, thread_id: str, tool_call_id: str) -> list[Confirmation]:
        """The answered (or expired) requests of one tool call, oldest first: the history of
        a tool that asks a series of questions."""
        async with self.db.session() as session:
            rows = await session.execute(
                select(ConfirmationRow)
                .where(
                    ConfirmationRow.thread_id == thread_id,
                    ConfirmationRow.tool_call_id == tool_call_id,
                    ConfirmationRow.status.in_(("answered", "expired")),
                )
                .order_by(ConfirmationRow.created_at, ConfirmationRow.request_id)
            )
            return [Confirmation.of(row) for row in rows.scalars()]

    async def answer(
        self, thread_id: str, request_id: str, answer: dict[str, Any], *, status: str = "answered"
    ) -> Confirmation:
        """Record the answer of a pending request, exactly once."""
        found = await self.get(request_id)
        if found.thread_id != thread_id:
            raise NotFoundError(f"thread {thread_id!r} has no confirmation request {request_id!r}")
        async with self.db.session() as session, session.begin():
            changed = await session.execute(
                update(ConfirmationRow)
                .where(
                    ConfirmationRow.request_id == request_id, ConfirmationRow.status == "pending"
                )
                .values(status=status, answer=answer, resolved_at=datetime.now(UTC))
            )
        if changed.rowcount == 0:  # type: ignore[attr-defined]
            raise FailedPreconditionError(
                f"confirmation request {request_id!r} was already resolved ({found.status})"
            )
        return await self.get(request_id)

    async def close_run(self, run_id: str) -> None:
        """Requests of a run that ended without an answer are cancelled."""
        async with self.db.session() as session, session.begin():
            await session.execute(
                update(ConfirmationRow)
                .where(ConfirmationRow.run_id == run_id, ConfirmationRow.status == "pending")
                .values(status="cancelled", resolved_at=datetime.now(UTC))
            )

    async def older_than(self, age: timedelta) -> list[Confirmation]:
        """Pending requests created at least `age` ago (not changed here)."""
        cutoff = datetime.now(UTC) - age
        async with self.db.session() as session:
            rows = await session.execute(
                select(ConfirmationRow).where(
                    ConfirmationRow.status == "pending", ConfirmationRow.created_at <= cutoff
                )
            )
            return [Confirmation.of(row) for row in rows.scalars()]

    async def mode(self, thread_id: str, action: str) -> PermissionMode:
        configured = self.modes.get(action, "require_approval")
        if configured != "require_approval":
            return configured
        async with self.db.session() as session:
            remembered = await session.get(PermissionRow, (thread_id, action))
        return "always_allow" if remembered is not None else configured

    async def domain_allowed(self, thread_id: str, host: str) -> bool:
        """Whether the thread approved requests to `host` (or to any host)."""
        for name in (host, ANY_HOST):
            if await self.mode(thread_id, domain_action(name)) == "always_allow":
                return True
        return False

    async def allow_domain(self, thread_id: str, host: str) -> None:
        """Remember the approval of `host` (ANY_HOST: every host) for the thread."""
        await self.always_allow(thread_id, domain_action(host))

    async def always_allow(self, thread_id: str, action: str) -> None:
        """Remember "always allow" for `action` in this thread."""
        async with self.db.engine.begin() as conn:
            await ensure_threads(conn, [thread_id])
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            await conn.execute(
                dialect.insert(PermissionRow)
                .values(
                    thread_id=thread_id,
                    action=action,
                    mode="always_allow",
                    created_at=datetime.now(UTC),
                )
                .on_conflict_do_nothing()
            )
