"""The tool registry: every tool by name, provider schemas, argument validation, permission
rules, and the call path that records each call in the thread's event log (`tool-call`, then
`tool-result` or `tool-error`).

The agent loop and `Tools.CallTool` share it: the same validation and the same HITL rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Coroutine
from functools import cached_property
from typing import Any

import structlog
from pydantic import TypeAdapter, ValidationError

from sandbox.errors import SandboxError
from server.errors import (
    FailedPreconditionError,
    InstanceAIError,
    InvalidArgumentError,
    NotFoundError,
)
from server.runtime import Runtime
from server.runtime.caller import LOCAL, Caller
from server.runtime.ids import new_id
from server.tools import (
    agents_module,
    browser,
    build,
    credentials,
    data_tables,
    executions,
    nodes,
    orchestration,
    projects,
    verify,
    web,
    workflows,
    workspace,
)
from server.tools.schema import Inexpressible, provider_rule_violations, sanitize
from server.tools.spec import Suspend, ToolContext, ToolModel, ToolSpec, blocked_message

log = structlog.get_logger(__name__)

# Event payloads stay small: long strings are cut, oversized values summarised.
MAX_EVENT_STRING = 2000
MAX_EVENT_BYTES = 64 * 1024


class ToolInputError(InvalidArgumentError):
    """The arguments do not fit the tool; the message tells the model what to fix."""


class ToolRegistry:
    def __init__(self, specs: list[ToolSpec]) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._adapters: dict[str, TypeAdapter[Any]] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"two tools are named {spec.name}")
            self._specs[spec.name] = spec
            self._adapters[spec.name] = TypeAdapter(spec.input_model)

    def specs(self, runtime: Runtime | None = None) -> list[ToolSpec]:
        """The tools, or those whose registration condition holds for `runtime`."""
        return [
            s
            for s in self._specs.values()
            if runtime is None or s.condition is None or s.condition(runtime)
        ]

    def get(self, name: str) -> ToolSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise NotFoundError(f"there is no tool {name!r}; ListTools names them all")
        return spec

    @cached_property
    def provider_schemas(self) -> dict[str, dict[str, Any]]:
        """Each expressible tool's input schema as providers accept it. A tool that cannot be
        expressed is left out (and logged) rather than failing every request."""
        schemas = {}
        for name, adapter in self._adapters.items():
            try:
                schema = sanitize(adapter.json_schema(by_alias=True))
            except Inexpressible as exc:
                log.warning(
                    "dropping tool: its input schema cannot be sent", tool=name, why=str(exc)
                )
                continue
            problems = provider_rule_violations(name, schema)
            if problems:
                log.warning("dropping tool", tool=name, why="; ".join(problems))
                continue
            schemas[name] = schema
        return schemas

    def listed(self, runtime: Runtime | None = None) -> list[tuple[ToolSpec, dict[str, Any]]]:
        """The tools a model or client may call, with their provider schemas."""
        schemas = self.provider_schemas
        return [(s, schemas[s.name]) for s in self.specs(runtime) if s.name in schemas]

    def overview(self, runtime: Runtime) -> list[tuple[ToolSpec, dict[str, Any], bool]]:
        """Every expressible tool with its schema and whether it is registered here."""
        registered = {s.name for s in self.specs(runtime)}
        schemas = self.provider_schemas
        return [
            (s, schemas[s.name], s.name in registered)
            for s in self._specs.values()
            if s.name in schemas
        ]

    def parse(self, spec: ToolSpec, arguments: dict[str, Any]) -> Any:
        """The arguments validated by the tool's real model (the provider schema is looser)."""
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

    async def execute(
        self, ctx: ToolContext, spec: ToolSpec, args: Any, raw: dict[str, Any], *, announce: bool
    ) -> ToolModel:
        """Run the handler, recording the call (unless `announce` is false: a resumed call
        was announced before it suspended) and its result or error. `Suspend` passes through
        with no result recorded."""
        runtime = ctx.runtime
        call_id = ctx.tool_call_id or new_id("call")
        where = {"run_id": ctx.run_id, "agent_id": ctx.agent_id}
        # The call's event commits while the tool runs (the log keeps the order); a tool that
        # needs its thread to exist waits for it, and nothing is answered before it is stored.
        recorded = _background(
            runtime.events.append(
                ctx.thread_id,
                "tool-call",
                {"toolCallId": call_id, "toolName": spec.name, "args": for_event(raw)},
                **where,
            )
            if announce
            else _nothing()
        )
        try:
            if not await runtime.threads.exists(ctx.thread_id):
                await recorded
            result = await spec.handler(ctx, args)
            await recorded
        except Suspend:
            await recorded
            raise
        except Exception as exc:
            await asyncio.gather(recorded, return_exceptions=True)
            await self.record_error(ctx, call_id, describe(exc))
            raise
        except asyncio.CancelledError:
            # The caller went away: the log still says how the call ended, before whoever
            # cancelled goes on (e.g. to delete the thread).
            ended = _background(
                runtime.events.append(
                    ctx.thread_id,
                    "tool-error",
                    {"toolCallId": call_id, "error": "cancelled"},
                    **where,
                )
            )
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(ended)
            raise
        await runtime.events.append(
            ctx.thread_id,
            "tool-result",
            {"toolCallId": call_id, "result": for_event(dump(result))},
            **where,
        )
        return result

    async def record_error(self, ctx: ToolContext, call_id: str, error: str) -> None:
        await ctx.runtime.events.append(
            ctx.thread_id,
            "tool-error",
            {"toolCallId": call_id, "error": error},
            run_id=ctx.run_id,
            agent_id=ctx.agent_id,
        )

    async def call(
        self,
        runtime: Runtime,
        thread_id: str,
        name: str,
        arguments: dict[str, Any],
        *,
        caller: Caller = LOCAL,
    ) -> ToolModel:
        """A direct call (`Tools.CallTool`): validated, permission-checked, recorded. A call
        that needs a person's answer cannot wait inside one request, so it is refused."""
        spec = self.get(name)
        if spec.name not in self.provider_schemas or spec not in self.specs(runtime):
            raise NotFoundError(f"tool {name!r} is not available on this server")
        args = self.parse(spec, arguments)
        if spec.asks_user:
            raise FailedPreconditionError(
                f"{name} asks the user a question; only the agent can run it (SendMessage)"
            )
        if spec.hitl_action is not None and not spec.self_gated:
            mode = await runtime.hitl.mode(thread_id, spec.hitl_action)
            if mode == "blocked":
                raise FailedPreconditionError(blocked_message(spec))
            if mode == "require_approval":
                raise FailedPreconditionError(
                    f"{name} needs a person's approval ({spec.hitl_action}: require_approval): "
                    "call it through the agent (SendMessage), or set INSTANCE_AI_PERMISSIONS "
                    f'to {{"{spec.hitl_action}": "always_allow"}}'
                )
        ctx = ToolContext(runtime=runtime, thread_id=thread_id, caller=caller)
        try:
            return await self.execute(ctx, spec, args, arguments, announce=True)
        except Suspend:
            raise FailedPreconditionError(
                f"{name} needs the user's answer here (e.g. approving a new host); call it "
                "through the agent (SendMessage), or set INSTANCE_AI_PERMISSIONS "
                f'to {{"{spec.hitl_action}": "always_allow"}}'
            ) from None


def describe(exc: BaseException) -> str:
    """What a caller may read of a failure: only errors raised on purpose carry a message
    meant for it."""
    if isinstance(exc, InstanceAIError | SandboxError):
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


def default_registry() -> ToolRegistry:
    return ToolRegistry(
        [
            *orchestration.TOOLS,
            *workspace.TOOLS,
            *build.TOOLS,
            *verify.TOOLS,
            *workflows.TOOLS,
            *executions.TOOLS,
            *nodes.TOOLS,
            *data_tables.TOOLS,
            *projects.TOOLS,
            *credentials.TOOLS,
            *web.TOOLS,
            *browser.TOOLS,
            *agents_module.TOOLS,
        ]
    )
