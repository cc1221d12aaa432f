"""The model turn: what a run's model is shown (its history, its prompt, the tools it is
offered) and one assistant turn streamed live, then recorded as durable blocks."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import structlog

from server.agent.distribution import for_background
from server.agent.prompt import background_prompt, orchestrator_prompt
from server.agent.provider import (
    ModelError,
    ModelProvider,
    ModelRequest,
    ModelTurn,
    StreamCallbacks,
)
from server.agent.run_state import RunScope
from server.agent.services import AgentServices
from server.errors import FailedPreconditionError
from server.mcp.gateway import GROUP as FILESYSTEM_GROUP
from server.runtime.conversation import repair, trim
from server.tools.loading import CORE_TOOLS, TOOL_LOADERS, loaded_tools
from server.tools.registry import ToolRegistry
from server.tools.spec import ToolSpec

__all__ = ["NO_MODEL", "ModelTurns", "call_of"]

log = structlog.get_logger(__name__)

NO_MODEL = (
    "no model is configured: set INSTANCE_AI_MODEL (e.g. claude-sonnet-4-5) and "
    "INSTANCE_AI_ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY); everything else works without one"
)


class ModelTurns:
    """The model's side of a run: what it is offered and what it says."""

    def __init__(
        self, services: AgentServices, registry: ToolRegistry, provider: ModelProvider | None
    ) -> None:
        self._services = services
        self._settings = services.settings
        self.registry = registry
        self.provider = provider

    def require_provider(self) -> ModelProvider:
        if self.provider is None:
            raise FailedPreconditionError(NO_MODEL)
        return self.provider

    # -- what the model is offered --------------------------------------------------------

    def offered(
        self,
        spec: ToolSpec[Any],
        *,
        background: bool,
        loaded: Collection[str] | None = None,
        attachments: bool = False,
    ) -> bool:
        """Whether a run's model is offered the tool: registered and expressible; for a
        background agent, one of its kind's (`distribution`); for the orchestrator, a core
        tool or one the thread loaded (`loaded` None: whether it could be loaded). The
        user's filesystem gateway's tools are offered as soon as it connects; parse-file only
        when the run's message carries a parseable attachment."""
        if not self.registry.offerable(spec):
            return False
        if spec.only_with_attachments and not attachments:
            return False
        if background:
            return for_background(spec)
        if not self._settings.agent_deferred_tools:
            return spec.name not in TOOL_LOADERS
        return (
            loaded is None
            or spec.name in CORE_TOOLS
            or spec.group == FILESYSTEM_GROUP
            or spec.name in loaded
        )

    def tools_for(self, scope: RunScope, loaded: Collection[str] | None) -> list[dict[str, Any]]:
        return [
            {"name": spec.name, "description": spec.description, "input_schema": schema}
            for spec, schema in self.registry.listed(scope.caller.user_id)
            if self.offered(
                spec, background=scope.background, loaded=loaded, attachments=scope.attachments
            )
        ]

    def background_tools(self) -> list[str]:
        """The tool names a background agent receives (its agent-spawned event says them)."""
        return [
            spec.name for spec, _ in self.registry.listed() if self.offered(spec, background=True)
        ]

    def loads_tools(self, scope: RunScope) -> bool:
        """Whether the run is offered the core plus what its thread loaded."""
        return not scope.background and self._settings.agent_deferred_tools

    async def loaded(self, scope: RunScope) -> set[str] | None:
        """The tools the orchestrator loaded in this thread (None for a background agent,
        which is offered its whole set)."""
        if not self.loads_tools(scope):
            return None
        return loaded_tools(await self._services.conversation.load(scope.thread_id))

    async def context(self, scope: RunScope) -> tuple[list[dict[str, Any]], set[str] | None]:
        """The history the model sees (trimmed to the budget, repaired) and the tools the
        thread loaded, from one read of the thread's messages."""
        full = await self._services.conversation.load(scope.thread_id)
        messages = repair(trim(full, self._settings.agent_history_token_budget))
        return messages, loaded_tools(full) if self.loads_tools(scope) else None

    # -- one turn -------------------------------------------------------------------------

    async def turn(
        self,
        scope: RunScope,
        messages: list[dict[str, Any]],
        loaded: Collection[str] | None = None,
    ) -> ModelTurn:
        """One assistant turn, streamed live; a stream that dies is retried from scratch
        (its live deltas are superseded by the durable text-block of the attempt that
        succeeds, keyed by responseId)."""
        provider = self.require_provider()
        skills = self._services.skills
        system = (
            background_prompt(skills, scope.kind)
            if scope.background
            else orchestrator_prompt(skills, self._settings.browser)
        )
        request = ModelRequest(
            system=system,
            messages=messages,
            tools=self.tools_for(scope, loaded),
            max_tokens=self._settings.model_max_tokens,
            thinking_budget=self._settings.model_thinking_budget_tokens,
        )
        events = self._services.events
        where = {"run_id": scope.run_id, "agent_id": scope.agent_id}
        response_id = ""

        def on_start(message_id: str) -> None:
            nonlocal response_id
            response_id = message_id

        def on_text(text: str) -> None:
            events.publish_live(
                scope.thread_id, "text-delta", {"text": text, "responseId": response_id}, **where
            )

        def on_reasoning(text: str) -> None:
            events.publish_live(scope.thread_id, "reasoning-delta", {"text": text}, **where)

        def on_tool_start(call_id: str, name: str) -> None:
            events.publish_live(
                scope.thread_id,
                "tool-input-start",
                {"toolCallId": call_id, "toolName": name},
                **where,
            )

        callbacks = StreamCallbacks(
            on_start=on_start,
            on_text=on_text,
            on_tool_start=on_tool_start,
            on_reasoning=on_reasoning,
        )
        events.publish_live(scope.thread_id, "status", {"message": "Thinking…"}, **where)
        attempts = self._settings.model_max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return await provider.complete(request, callbacks)
            except ModelError as exc:
                if not exc.retryable or attempt == attempts:
                    raise
                log.warning("model turn failed; retrying", attempt=attempt, error=str(exc))
                await asyncio.sleep(min(0.25 * 2**attempt, 8.0))
        raise AssertionError("unreachable")

    async def publish_text(self, scope: RunScope, turn: ModelTurn) -> None:
        """The turn's durable blocks: what the model thought (reasoning-block), then said."""
        events = self._services.events
        where = {"run_id": scope.run_id, "agent_id": scope.agent_id}
        if turn.reasoning:
            await events.append(
                scope.thread_id, "reasoning-block", {"text": turn.reasoning}, **where
            )
        if turn.text:
            await events.append(
                scope.thread_id,
                "text-block",
                {"text": turn.text, "responseId": turn.message_id},
                **where,
            )


def call_of(block: dict[str, Any], turn: ModelTurn) -> dict[str, Any]:
    """A tool_use block of the turn as the call the run executes (and persists)."""
    call = {"id": block["id"], "name": block["name"], "input": block.get("input") or {}}
    if block["id"] in turn.malformed:
        call["malformed"] = turn.malformed[block["id"]]
    return call
