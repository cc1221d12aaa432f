"""The tool registry: every tool by name, provider schemas, argument validation, permission
rules, and the call path that records each call in the thread's event log (`tool-call`, then
`tool-result` or `tool-error`).

The agent loop and `Tools.CallTool` share it: the same validation and the same HITL rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, TypeVar

import structlog
from jsonschema import Draft202012Validator
from jsonschema import ValidationError as SchemaError
from jsonschema.validators import validator_for
from pydantic import TypeAdapter, ValidationError

from server.core.caller import LOCAL, Caller
from server.core.ids import new_id
from server.errors import (
    CALLER_ERRORS,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from server.runtime.events import EventLog
from server.runtime.hitl import Hitl
from server.store.models import GRANT_KEY_MAX
from server.tools.schema import Inexpressible, provider_rule_violations, sanitize
from server.tools.spec import (
    Orchestration,
    Suspend,
    ToolContext,
    ToolModel,
    ToolSource,
    ToolSpec,
    blocked_message,
)

__all__ = [
    "CallSite",
    "ToolInputError",
    "ToolRegistry",
    "describe",
    "dump",
    "provider_schema",
]

log = structlog.get_logger(__name__)
T = TypeVar("T")

# Event payloads stay small: long strings are cut, oversized values summarised.
MAX_EVENT_STRING = 2000
MAX_EVENT_BYTES = 64 * 1024


class ToolInputError(InvalidArgumentError):
    """The arguments do not fit the tool; the message tells the model what to fix."""


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
    resume: dict[str, Any] | None = None
    orchestration: Orchestration | None = None

    @property
    def where(self) -> dict[str, str | None]:
        return {"run_id": self.run_id, "agent_id": self.agent_id}


# What the permission rule says of a call: go ahead, refuse (blocked), or ask a person.
Decision = Literal["allow", "blocked", "ask"]


class ToolRegistry:
    """The tools by name with their provider schemas, their argument validation, the
    permission rule, and the one path every call takes (recorded in the thread's log:
    `tool-call`, then `tool-result` or `tool-error`). The agent and `Tools.CallTool` share it.

    Each tool group's services object (e.g. `DataTableTools`) is bound here once; a handler
    receives its own group's and nothing else."""

    def __init__(
        self,
        specs: list[ToolSpec[Any]],
        services: Iterable[object] = (),
        *,
        events: EventLog | None = None,
        hitl: Hitl | None = None,
        thread_exists: Callable[[str], Awaitable[bool]] | None = None,
        sources: Iterable[ToolSource] = (),
    ) -> None:
        self._specs: dict[str, ToolSpec[Any]] = {}
        self._sources = list(sources)
        self._adapters: dict[str, TypeAdapter[Any]] = {}
        self._services: dict[type, object] = {type(s): s for s in services}
        self._events = events
        self._hitl = hitl
        self._thread_exists = thread_exists
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"two tools are named {spec.name}")
            self._specs[spec.name] = spec
            self._adapters[spec.name] = TypeAdapter(spec.input_model)

    # -- what there is ----------------------------------------------------------------------

    def _services_of(self, spec: ToolSpec[Any]) -> Any:
        found = self._services.get(spec.services)
        if found is None:
            raise UnavailableError(f"{spec.name} is not set up on this server")
        return found

    def registered(self, spec: ToolSpec[Any]) -> bool:
        """Its group's services are bound and its registration condition holds for them."""
        if spec.services not in self._services:
            return False
        return spec.condition is None or spec.condition(self._services[spec.services])

    def specs(self) -> list[ToolSpec[Any]]:
        """The tools registered here."""
        return [s for s in self._specs.values() if self.registered(s)]

    def get(self, name: str, user_id: str | None = None) -> ToolSpec[Any]:
        """The tool called `name`: one of the service's, or one a source offers now (to
        `user_id`, for a user's own sources such as a filesystem gateway)."""
        spec = self._specs.get(name) or self._dynamic(user_id).get(name)
        if spec is None:
            raise NotFoundError(f"there is no tool {name!r}; ListTools names them all")
        return spec

    def _dynamic(self, user_id: str | None) -> dict[str, ToolSpec[Any]]:
        """The sources' current tools; none may take the name of one of the service's."""
        found: dict[str, ToolSpec[Any]] = {}
        for source in self._sources:
            for spec in source.specs(user_id):
                if spec.name not in self._specs and spec.provider_schema is not None:
                    found.setdefault(spec.name, spec)
        return found

    @cached_property
    def provider_schemas(self) -> dict[str, dict[str, Any]]:
        """Each expressible tool's input schema as providers accept it. A tool that cannot be
        expressed is left out (and logged) rather than failing every request."""
        schemas = {}
        for name, adapter in self._adapters.items():
            schema = provider_schema(name, adapter.json_schema(by_alias=True))
            if schema is not None:
                schemas[name] = schema
        return schemas

    def schema_of(self, spec: ToolSpec[Any]) -> dict[str, Any] | None:
        """The schema the model is shown, None when the tool cannot be expressed."""
        if spec.json_schema is not None:
            return spec.provider_schema
        return self.provider_schemas.get(spec.name)

    def listed(self, user_id: str | None = None) -> list[tuple[ToolSpec[Any], dict[str, Any]]]:
        """The tools a model or client may call, with their provider schemas (with the
        sources' tools for everyone and for `user_id`)."""
        schemas = self.provider_schemas
        static = [(s, schemas[s.name]) for s in self.specs() if s.name in schemas]
        return static + self._dynamic_listed(user_id)

    def _dynamic_listed(self, user_id: str | None) -> list[tuple[ToolSpec[Any], dict[str, Any]]]:
        return [
            (s, s.provider_schema)
            for s in self._dynamic(user_id).values()
            if s.provider_schema is not None and self.registered(s)
        ]

    def overview(
        self, user_id: str | None = None
    ) -> list[tuple[ToolSpec[Any], dict[str, Any], bool]]:
        """Every expressible tool with its schema and whether it is registered here."""
        schemas = self.provider_schemas
        static = [
            (s, schemas[s.name], self.registered(s))
            for s in self._specs.values()
            if s.name in schemas
        ]
        return static + [(s, schema, True) for s, schema in self._dynamic_listed(user_id)]

    def parse(self, spec: ToolSpec[Any], arguments: dict[str, Any]) -> Any:
        """The arguments validated by the tool's real model (the provider schema is looser)."""
        if spec.json_schema is not None:
            return _parse_json(spec, arguments)
        try:
            return self._adapters[spec.name].validate_python(arguments)
        except ValidationError as exc:
            problems = "\n".join(
                f"- {'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
                for error in exc.errors(include_url=False)
            )
            raise ToolInputError(
                f"Invalid arguments for {spec.name}; fix them and call again:\n{problems}"
            ) from None

    # -- the permission rule ------------------------------------------------------------------

    async def decide(self, thread_id: str, spec: ToolSpec[Any], args: Any = None) -> Decision:
        """The permission rule of a call (INSTANCE_AI_PERMISSIONS and the thread's answers:
        "always" for the action, or for the resource the call acts on, e.g. one workflow).
        Tools that gate themselves (per host, say) and ungated tools go ahead here."""
        if spec.hitl_action is None or spec.self_gated:
            return "allow"
        hitl = self._require(self._hitl)
        mode = await hitl.mode(thread_id, spec.hitl_action)
        if mode == "blocked":
            return "blocked"
        if mode == "require_approval" and (key := grant_key(spec, args)) is not None:
            mode = await hitl.mode(thread_id, key)
        return "ask" if mode == "require_approval" else "allow"

    async def may_wait(self, thread_id: str, spec: ToolSpec[Any]) -> bool:
        """Whether a call may end up waiting for a person (so it runs on its own)."""
        return spec.asks_user or spec.may_ask or await self.decide(thread_id, spec) == "ask"

    async def allow_for_thread(self, thread_id: str, spec: ToolSpec[Any], args: Any) -> None:
        """The person approved this tool's action for the rest of the thread: on the
        resource the call acts on (one workflow, table, folder, credential), else on all."""
        if spec.hitl_action is not None:
            key = grant_key(spec, args) or spec.hitl_action
            await self._require(self._hitl).always_allow(thread_id, key)

    # -- the call's events ------------------------------------------------------------------

    async def announce(self, site: CallSite, name: str, raw: dict[str, Any]) -> None:
        """`tool-call`: a call about to run or to wait for a person."""
        await self._require(self._events).append(
            site.thread_id,
            "tool-call",
            {"toolCallId": site.call_id, "toolName": name, "args": for_event(raw)},
            **site.where,
        )

    async def refuse(
        self, site: CallSite, name: str, raw: dict[str, Any], error: str, *, announce: bool
    ) -> None:
        """A call that did not run, recorded like any failed call."""
        if announce:
            await self.announce(site, name, raw)
        await self.record_error(site, error)

    async def record_error(self, site: CallSite, error: str, *, kind: str = "tool-error") -> None:
        """`kind`: tool-error, or tool-interrupted for a call cut off (a cancel)."""
        await self._require(self._events).append(
            site.thread_id,
            kind,
            {"toolCallId": site.call_id, "error": error},
            **site.where,
        )

    # -- running a call ---------------------------------------------------------------------

    async def execute(
        self, site: CallSite, spec: ToolSpec[Any], args: Any, raw: dict[str, Any], *, announce: bool
    ) -> ToolModel:
        """Run the handler with its group's services, recording the call (unless `announce`
        is false: a resumed or approved call was announced before it waited) and its result
        or error. `Suspend` passes through with no result recorded."""
        events = self._require(self._events)
        ctx = ToolContext(
            services=self._services_of(spec),
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
        recorded = _background(self.announce(site, spec.name, raw) if announce else _nothing())
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
            await self.record_error(site, describe(exc))
            raise
        except asyncio.CancelledError:
            # The caller went away: the log still says how the call ended, before whoever
            # cancelled goes on (e.g. to delete the thread).
            ended = _background(self.record_error(site, "cancelled", kind="tool-interrupted"))
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(ended)
            raise
        await events.append(
            site.thread_id,
            "tool-result",
            {"toolCallId": site.call_id, "result": for_event(dump(result))},
            **site.where,
        )
        return result

    async def call(
        self,
        thread_id: str,
        name: str,
        arguments: dict[str, Any],
        *,
        caller: Caller = LOCAL,
    ) -> ToolModel:
        """A direct call (`Tools.CallTool`): validated, permission-checked, recorded. A call
        that needs a person's answer cannot wait inside one request, so it is refused."""
        spec = self.get(name, caller.user_id)
        if self.schema_of(spec) is None or not self.registered(spec):
            needs = f": it needs {spec.requires}" if spec.requires else ""
            raise NotFoundError(f"tool {name!r} is not available on this server{needs}")
        args = self.parse(spec, arguments)
        if spec.asks_user:
            raise FailedPreconditionError(
                f"{name} asks the user a question; only the agent can run it (SendMessage)"
            )
        decision = await self.decide(thread_id, spec, args)
        if decision == "blocked":
            raise FailedPreconditionError(blocked_message(spec))
        if decision == "ask":
            raise FailedPreconditionError(
                f"{name} needs a person's approval ({spec.hitl_action}: require_approval): "
                "call it through the agent (SendMessage), or set INSTANCE_AI_PERMISSIONS "
                f'to {{"{spec.hitl_action}": "always_allow"}}'
            )
        site = CallSite(thread_id=thread_id, call_id=new_id("call"), caller=caller)
        try:
            return await self.execute(site, spec, args, arguments, announce=True)
        except Suspend:
            raise FailedPreconditionError(
                f"{name} needs the user's answer here (e.g. approving a new host); call it "
                "through the agent (SendMessage), or set INSTANCE_AI_PERMISSIONS "
                f'to {{"{spec.hitl_action}": "always_allow"}}'
            ) from None

    @staticmethod
    def _require(part: T | None) -> T:
        if part is None:
            raise UnavailableError("this tool registry was made without the event log")
        return part


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


def provider_schema(name: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """`schema` as model providers accept it, None (logged) when it cannot be expressed."""
    try:
        sanitized = sanitize(schema)
    except Inexpressible as exc:
        log.warning("dropping tool: its input schema cannot be sent", tool=name, why=str(exc))
        return None
    problems = provider_rule_violations(name, sanitized)
    if problems:
        log.warning("dropping tool", tool=name, why="; ".join(problems))
        return None
    return sanitized


def _parse_json(spec: ToolSpec[Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments checked against a JSON-Schema tool's real schema (its own draft, else
    2020-12), every problem listed so the model can correct them all at once."""
    assert spec.json_schema is not None
    validator_class = validator_for(spec.json_schema, default=Draft202012Validator)
    problems = sorted(
        validator_class(spec.json_schema).iter_errors(arguments), key=lambda e: list(e.path)
    )
    if problems:
        lines = "\n".join(f"- {_where(p)}: {p.message[:300]}" for p in problems[:20])
        raise ToolInputError(
            f"Invalid arguments for {spec.name}; fix them and call again:\n{lines}"
        )
    return arguments


def _where(problem: SchemaError) -> str:
    return ".".join(str(p) for p in problem.absolute_path) or "arguments"


def describe(exc: BaseException) -> str:
    """What a caller may read of a failure: only errors raised on purpose carry a message
    meant for it."""
    if isinstance(exc, CALLER_ERRORS):
        return str(exc)
    return "internal error (see the server log)"


async def _nothing() -> None:
    return None


def _background(append: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """An append that runs on its own; a failure is logged by the event log, not lost here."""
    task = asyncio.ensure_future(append)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return task


def dump(result: ToolModel) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def for_event(value: Any) -> Any:
    """`value` bounded for an event payload."""
    bounded = _cut_strings(value)
    size = len(json.dumps(bounded))
    if size > MAX_EVENT_BYTES:
        return {"omitted": f"{size} bytes; the caller received it in full"}
    return bounded


def _cut_strings(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_EVENT_STRING:
        return value[:MAX_EVENT_STRING] + f"… [{len(value) - MAX_EVENT_STRING} more characters]"
    if isinstance(value, dict):
        return {k: _cut_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v) for v in value]
    return value
