"""The model provider interface the agent loop talks to.

Messages, content blocks and tool definitions use the Messages API shapes (`role`, `content`
blocks of `text` / `thinking` / `tool_use` / `tool_result`), which is what the loop persists as
history (thinking blocks with their signatures: the API wants them back with tool results)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["ModelError", "ModelProvider", "ModelRequest", "ModelTurn", "StreamCallbacks"]


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int
    # Extended thinking: the tokens the model may think with per turn; 0: no thinking.
    thinking_budget: int = 0


@dataclass(kw_only=True)
class ModelTurn:
    """One finished assistant message."""

    message_id: str
    content: list[dict[str, Any]]
    stop_reason: str
    # Tool calls whose input was not valid JSON: id → the problem, told back to the model.
    malformed: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(b["text"] for b in self.content if b["type"] == "text")

    @property
    def reasoning(self) -> str:
        """What the model thought before answering (its thinking blocks, not redacted ones)."""
        return "\n\n".join(b["thinking"] for b in self.content if b["type"] == "thinking")

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b["type"] == "tool_use"]


class ModelError(Exception):
    """The provider failed. `retryable`: a later attempt may succeed (overload, rate limit, a
    stream that died); otherwise the request itself is wrong and retrying cannot help."""

    def __init__(self, message: str, *, retryable: bool, status_code: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code


@dataclass(frozen=True, kw_only=True)
class StreamCallbacks:
    """Live progress of a turn: text and thinking as they arrive, the start of each tool call."""

    on_start: Callable[[str], None]
    on_text: Callable[[str], None]
    on_tool_start: Callable[[str, str], None]
    on_reasoning: Callable[[str], None]


class ModelProvider(Protocol):
    name: str

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelTurn:
        """Stream one assistant turn. Raises ModelError; cancelling aborts the stream."""
        ...

    async def close(self) -> None: ...
