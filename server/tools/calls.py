"""The one way a tool is called, by the agent, a gRPC front or the MCP server alike:

    look up → may the caller call it (policy) → parse → gate (permission rule) → execute
    → record (`tool-call`, then `tool-result`, `tool-error` or `tool-interrupted`)

A call whose permission rule says "ask", or whose tool asks a question itself (`Suspend`),
either waits (`Waiting`: the agent shows a card and resumes the call with the answer) or is
refused with an error saying what to do instead: the caller's `CallPolicy` says which. A
refusal is raised as the error whose kind says why (not found, bad arguments, not allowed
now), so each front maps it to its own status; the agent hands its message to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from server.core.caller import LOCAL, Caller
from server.core.failures import describe
from server.core.ids import new_id
from server.errors import FailedPreconditionError, InstanceAIError, NotFoundError
from server.runtime.events import EventLog
from server.runtime.hitl import Hitl
from server.store.models import GRANT_KEY_MAX
from server.tools.approval_cards import Card, card_for
from server.tools.registry import ToolInputError, ToolRegistry, dump, for_event
from server.tools.spec import (
    Orchestration,
    Suspend,
    ToolContext,
    ToolModel,
    ToolSpec,
    blocked_message,
)

__all__ = [
    "CallPolicy",
    "CallSite",
    "Decision",
    "DirectPolicy",
    "Output",
    "ToolCalls",
    "Waiting",
    "grant_key",
]

# A tool's output model, as a front reads it (`ToolCalls.direct_as`).
Output = TypeVar("Output", bound=ToolModel)

# What the permission rule says of a call: go ahead, refuse (blocked), or ask a person.
Decision = Literal["allow", "blocked", "ask"]


@dataclass(frozen=True, kw_only=True)
class CallSite:
    """Where a call happens and who makes it: what its events and its handler are told."""

    thread_id: str
    call_id: str
    run_id: str | None = None
    agent_id: str | None = None
    caller: Caller = LOCAL
    # The user message this run answers (see ToolContext).
    message_group_id: str | None = None
    run_kind: str = "direct"
    # The handler's question answered (a resumed `Suspend`).
    resume: dict[str, Any] | None = None
    orchestration: Orchestration | None = None

    @property
    def where(self) -> dict[str, str | None]:
        return {"run_id": self.run_id, "agent_id": self.agent_id}


@dataclass(frozen=True, kw_only=True)
class Waiting:
    """The call waits for a person's answer: to the permission rule's question ("approval")
    or to the tool's own ("tool"). `question` is the card's payload."""

    question: dict[str, Any]
    gate: Literal["approval", "tool"]


class CallPolicy(Protocol):
    """What a kind of caller decides of a call; everything else is the same for all."""

    # Whether a refused call is recorded in the thread's log (the agent's are part of its
    # conversation; a direct call's refusal is its error status and nothing else).
    records_refusals: bool

    async def refusal(self, name: str, spec: ToolSpec[Any] | None) -> InstanceAIError | None:
        """Why this caller may not call `name` now (`spec` None: no such tool), or None."""
        ...

    def on_ask(self, spec: ToolSpec[Any]) -> Literal["wait", "allow"] | InstanceAIError:
        """What the permission rule's "ask" means here: wait for the person, go ahead (an
        earlier consent covers it), or this refusal."""
        ...

    def on_question(self, spec: ToolSpec[Any]) -> InstanceAIError | None:
        """None: the tool's own question waits for an answer; else this refusal."""
        ...

    def running(self, site: CallSite, spec: ToolSpec[Any]) -> None:
        """The call passed every check and starts now."""
        ...


class DirectPolicy:
    """A direct call (`Tools.CallTool`, the Pipeline service, the MCP server): one request
    cannot wait for a person, so whatever would ask one is refused, saying what to do."""

    records_refusals = False

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry

    async def refusal(self, name: str, spec: ToolSpec[Any] | None) -> InstanceAIError | None:
        if spec is None:
            return NotFoundError(f"there is no tool {name!r}; ListTools names them all")
        if not self._registry.offerable(spec):
            needs = f": it needs {spec.requires}" if spec.requires else ""
            return NotFoundError(f"tool {name!r} is not available on this server{needs}")
        if spec.asks_user:
            return FailedPreconditionError(
                f"{name} asks the user a question; only the agent can run it (SendMessage)"
            )
        return None

    def on_ask(self, spec: ToolSpec[Any]) -> InstanceAIError:
        return FailedPreconditionError(
            f"{spec.name} needs a person's approval ({spec.hitl_action}: require_approval): "
            + _through_the_agent(spec)
        )

    def on_question(self, spec: ToolSpec[Any]) -> InstanceAIError:
        return FailedPreconditionError(
            f"{spec.name} needs the user's answer here (e.g. approving a new host); "
            + _through_the_agent(spec)
        )

    def running(self, site: CallSite, spec: ToolSpec[Any]) -> None:
        return None


def _through_the_agent(spec: ToolSpec[Any]) -> str:
    return (
        "call it through the agent (SendMessage), or set INSTANCE_AI_PERMISSIONS "
        f'to {{"{spec.hitl_action}": "always_allow"}}'
    )


class ToolCalls:
    """Every tool call goes through `call`: the same lookup, validation, permission rule,
    execution and events for every caller; the `CallPolicy` says what asking means."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        events: EventLog,
        hitl: Hitl,
        thread_exists: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self.registry = registry
        self._direct = DirectPolicy(registry)
        self._events = events
        self._hitl = hitl
        self._thread_exists = thread_exists

    async def direct(
        self, thread_id: str, name: str, arguments: dict[str, Any], *, caller: Caller = LOCAL
    ) -> ToolModel:
        """A call from a front that cannot wait for a person (see `DirectPolicy`)."""
        site = CallSite(thread_id=thread_id, call_id=new_id("call"), caller=caller)
        outcome = await self.call(site, name, arguments, self._direct)
        assert not isinstance(outcome, Waiting)  # the direct policy never waits
        return outcome

    async def direct_as(
        self,
        output: type[Output],
        thread_id: str,
        name: str,
        arguments: dict[str, Any],
        *,
        caller: Caller = LOCAL,
    ) -> Output:
        """`direct`, for a front that reads the result as the tool's output model."""
        result = await self.direct(thread_id, name, arguments, caller=caller)
        if not isinstance(result, output):
            raise TypeError(f"{name} answered {type(result).__name__}, not {output.__name__}")
        return result

    async def call(
        self,
        site: CallSite,
        name: str,
        arguments: dict[str, Any],
        policy: CallPolicy,
        *,
        answer: dict[str, Any] | None = None,
        gate: Literal["approval", "tool"] | None = None,
        malformed: str | None = None,
    ) -> ToolModel | Waiting:
        """One call: its result, or `Waiting` for a person. A refusal or a failure of the
        tool is raised (recorded first). `gate` names what a resumed call waited for (it was
        announced then) and `answer` is the person's; `malformed` says why the model's
        arguments could not be read as JSON."""
        announce = gate is None
        spec, args = await self._check(site, name, arguments, policy, announce, malformed)
        if gate != "approval":
            waiting = await self._gate(site, spec, args, arguments, policy, announce)
            if waiting is not None:
                return waiting
        elif answer is not None:
            if not answer.get("approved"):
                denied = FailedPreconditionError(_denied(spec.name, answer))
                raise await self._refused(site, name, arguments, denied, policy, False)
            if answer.get("scope") == "session":
                await self.allow_for_thread(site.thread_id, spec, args)
        policy.running(site, spec)
        try:
            return await self._execute(site, spec, args, arguments, announce=announce)
        except Suspend as wait:
            refusal = policy.on_question(spec)
            if refusal is None:
                return Waiting(gate="tool", question=wait.question)
            await self._record_error(site, str(refusal))
            raise refusal from None

    # -- offer and check ----------------------------------------------------------------------

    async def _check(
        self,
        site: CallSite,
        name: str,
        arguments: dict[str, Any],
        policy: CallPolicy,
        announce: bool,
        malformed: str | None,
    ) -> tuple[ToolSpec[Any], Any]:
        """The tool and its arguments parsed by its real model, or the refusal raised."""
        spec = self._lookup(name, site.caller)
        refusal = await policy.refusal(name, spec)
        if refusal is None and malformed:
            refusal = ToolInputError(f"{malformed}. Call {name} again with a JSON object.")
        if refusal is not None or spec is None:
            assert refusal is not None  # every policy refuses a tool that does not exist
            raise await self._refused(site, name, arguments, refusal, policy, announce)
        try:
            return spec, self.registry.parse(spec, arguments)
        except ToolInputError as exc:
            raise await self._refused(site, name, arguments, exc, policy, announce) from None

    def _lookup(self, name: str, caller: Caller) -> ToolSpec[Any] | None:
        try:
            return self.registry.get(name, caller.user_id)
        except NotFoundError:
            return None

    async def _refused(
        self,
        site: CallSite,
        name: str,
        arguments: dict[str, Any],
        error: InstanceAIError,
        policy: CallPolicy,
        announce: bool,
    ) -> InstanceAIError:
        """A call that did not run, recorded like any failed call where the policy says so;
        returned for the caller to raise."""
        if policy.records_refusals:
            if announce:
                await self._announce(site, name, arguments)
            await self._record_error(site, str(error))
        return error

    # -- the permission rule ------------------------------------------------------------------

    async def _gate(
        self,
        site: CallSite,
        spec: ToolSpec[Any],
        args: Any,
        arguments: dict[str, Any],
        policy: CallPolicy,
        announce: bool,
    ) -> Waiting | None:
        """None to go ahead, `Waiting` for the person's approval, or the refusal raised."""
        decision = await self.decide(site.thread_id, spec, args)
        if decision == "allow":
            return None
        handling: Literal["wait", "allow"] | InstanceAIError
        if decision == "blocked":
            handling = FailedPreconditionError(blocked_message(spec))
        else:
            handling = policy.on_ask(spec)
        if isinstance(handling, InstanceAIError):
            raise await self._refused(site, spec.name, arguments, handling, policy, announce)
        if handling == "allow":
            return None
        if announce:
            await self._announce(site, spec.name, arguments)
        card = await card_for(
            spec.name, spec.hitl_action, self.registry.services_of(spec), args, site.caller
        )
        if card is None:
            card = Card(message=f"Allow {spec.name}?", severity=spec.severity)
        return Waiting(gate="approval", question=card.question())

    async def decide(self, thread_id: str, spec: ToolSpec[Any], args: Any = None) -> Decision:
        """The permission rule of a call (INSTANCE_AI_PERMISSIONS and the thread's answers:
        "always" for the action, or for the resource the call acts on, e.g. one workflow).
        Tools that gate themselves (per host, say) and ungated tools go ahead here."""
        if spec.hitl_action is None or spec.self_gated:
            return "allow"
        mode = await self._hitl.mode(thread_id, spec.hitl_action)
        if mode == "blocked":
            return "blocked"
        if mode == "require_approval" and (key := grant_key(spec, args)) is not None:
            mode = await self._hitl.mode(thread_id, key)
        return "ask" if mode == "require_approval" else "allow"

    async def may_wait(self, thread_id: str, name: str, caller: Caller) -> bool:
        """Whether a call may end up waiting for a person (so it runs on its own)."""
        spec = self._lookup(name, caller)
        if spec is None:
            return False
        return spec.asks_user or spec.may_ask or await self.decide(thread_id, spec) == "ask"

    async def allow_for_thread(self, thread_id: str, spec: ToolSpec[Any], args: Any) -> None:
        """The person approved this tool's action for the rest of the thread: on the
        resource the call acts on (one workflow, table, folder, credential), else on all."""
        if spec.hitl_action is not None:
            key = grant_key(spec, args) or spec.hitl_action
            await self._hitl.always_allow(thread_id, key)

    # -- running and recording ----------------------------------------------------------------

    async def _execute(
        self, site: CallSite, spec: ToolSpec[Any], args: Any, raw: dict[str, Any], *, announce: bool
    ) -> ToolModel:
        """Run the handler with its group's services, recording the call (unless it was
        announced before it waited) and its result or error. `Suspend` passes through with
        nothing recorded: the call goes on once answered."""
        ctx = ToolContext(
            services=self.registry.services_of(spec),
            thread_id=site.thread_id,
            run_id=site.run_id,
            agent_id=site.agent_id,
            tool_call_id=site.call_id,
            message_group_id=site.message_group_id,
            run_kind=site.run_kind,
            resume=site.resume,
            orchestration=site.orchestration,
            caller=site.caller,
        )
        # The call's event commits while the tool runs (the log keeps the order); a tool that
        # needs its thread to exist waits for it, and nothing is answered before it is stored.
        recorded = _background(self._announce(site, spec.name, raw) if announce else _nothing())
        try:
            if self._thread_exists is not None and not await self._thread_exists(site.thread_id):
                await recorded
            result = await spec.handler(ctx, args)
            await recorded
        except Suspend:
            await recorded
            raise
        except Exception as exc:
            await asyncio.gather(recorded, return_exceptions=True)
            await self._record_error(site, describe(exc))
            raise
        except asyncio.CancelledError:
            # The caller went away: the log still says how the call ended, before whoever
            # cancelled goes on (e.g. to delete the thread).
            ended = _background(self._record_error(site, "cancelled", kind="tool-interrupted"))
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(ended)
            raise
        await self._events.append(
            site.thread_id,
            "tool-result",
            {"toolCallId": site.call_id, "result": for_event(dump(result))},
            **site.where,
        )
        return result

    async def _announce(self, site: CallSite, name: str, raw: dict[str, Any]) -> None:
        """`tool-call`: a call about to run or to wait for a person."""
        await self._events.append(
            site.thread_id,
            "tool-call",
            {"toolCallId": site.call_id, "toolName": name, "args": for_event(raw)},
            **site.where,
        )

    async def _record_error(self, site: CallSite, error: str, *, kind: str = "tool-error") -> None:
        """`kind`: tool-error, or tool-interrupted for a call cut off (a cancel)."""
        await self._events.append(
            site.thread_id, kind, {"toolCallId": site.call_id, "error": error}, **site.where
        )


def _denied(tool: str, answer: dict[str, Any]) -> str:
    feedback = answer.get("userInput")
    text = f"The user denied {tool}; do not retry it in this turn."
    return f"{text} They said: {feedback}" if feedback else text


# The arguments naming the resource a call acts on, most specific first: an "always in this
# thread" answer covers that resource only.
RESOURCE_FIELDS = ("data_table_id", "credential_id", "workflow_id", "folder_id")


def grant_key(spec: ToolSpec[Any], args: Any) -> str | None:
    """The per-resource grant of a gated call (`runWorkflow:wf_1`), None when the call names
    no resource (e.g. creating a folder): then "always" covers the action."""
    key = None
    if spec.grant is not None and args is not None:
        key = f"{spec.hitl_action}:{spec.grant(args)}"
    for field in RESOURCE_FIELDS:
        value = getattr(args, field, None)
        if key is None and isinstance(value, str) and value:
            key = f"{spec.hitl_action}:{field.removesuffix('_id')}:{value}"
    if key is not None and len(key) > GRANT_KEY_MAX:
        # Still one resource's grant, in a key the store holds.
        key = f"{spec.hitl_action}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    return key


async def _nothing() -> None:
    return None


def _background(append: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """An append that runs on its own; a failure is logged by the event log, not lost here."""
    task = asyncio.ensure_future(append)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return task
