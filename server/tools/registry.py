"""The tool registry: every tool by name, argument validation, and the call path that records
each call in the thread's event log (`tool-call`, then `tool-result` or `tool-error`).

The orchestrator (with provider schema sanitising) builds on this; clients reach it through
`Tools.CallTool`, and `Pipeline.BuildWorkflow` is a typed front for `build-workflow`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

from pydantic import ValidationError

from sandbox.errors import SandboxError
from server.errors import InstanceAIError, InvalidArgumentError, NotFoundError
from server.runtime import Runtime
from server.runtime.ids import new_id
from server.tools import build, executions, nodes, verify, workflows, workspace
from server.tools.spec import ToolContext, ToolModel, ToolSpec

# Event payloads stay small: long strings are cut, oversized values summarised.
MAX_EVENT_STRING = 2000
MAX_EVENT_BYTES = 64 * 1024


class ToolRegistry:
    def __init__(self, specs: list[ToolSpec]) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"two tools are named {spec.name}")
            self._specs[spec.name] = spec

    def specs(self) -> list[ToolSpec]:
        return list(self._specs.values())

    def get(self, name: str) -> ToolSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise NotFoundError(f"there is no tool {name!r}; ListTools names them all")
        return spec

    @staticmethod
    def input_schema(spec: ToolSpec) -> dict[str, Any]:
        return spec.input_model.model_json_schema(by_alias=True)

    def parse(self, name: str, arguments: dict[str, Any]) -> tuple[ToolSpec, ToolModel]:
        spec = self.get(name)
        try:
            return spec, spec.input_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
                for error in exc.errors()
            )
            raise InvalidArgumentError(f"{name}: {problems}") from None

    async def call(
        self, runtime: Runtime, thread_id: str, name: str, arguments: dict[str, Any]
    ) -> ToolModel:
        """Validate, record the call, run it, record its result or error."""
        spec, args = self.parse(name, arguments)
        call_id = new_id("call")
        # The call's event commits while the tool runs (the log keeps the order); a tool that
        # needs its thread to exist waits for it, and nothing is answered before it is stored.
        recorded = _background(
            runtime.events.append(
                thread_id,
                "tool-call",
                {"toolCallId": call_id, "toolName": name, "args": for_event(arguments)},
            )
        )
        try:
            if not await runtime.threads.exists(thread_id):
                await recorded
            result = await spec.handler(ToolContext(runtime=runtime, thread_id=thread_id), args)
            await recorded
        except Exception as exc:
            await asyncio.gather(recorded, return_exceptions=True)
            # Only errors raised on purpose carry a message meant for the caller.
            known = isinstance(exc, InstanceAIError | SandboxError)
            error = str(exc) if known else "internal error (see the server log)"
            await runtime.events.append(
                thread_id, "tool-error", {"toolCallId": call_id, "error": error}
            )
            raise
        except asyncio.CancelledError:
            # The caller went away: the log still says how the call ended.
            _background(
                runtime.events.append(
                    thread_id, "tool-error", {"toolCallId": call_id, "error": "cancelled"}
                )
            )
            raise
        await runtime.events.append(
            thread_id, "tool-result", {"toolCallId": call_id, "result": for_event(dump(result))}
        )
        return result


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
            *workspace.TOOLS,
            *build.TOOLS,
            *verify.TOOLS,
            *workflows.TOOLS,
            *executions.TOOLS,
            *nodes.TOOLS,
        ]
    )
