"""The Anthropic provider: the official SDK, streaming, with the SDK's retries and backoff for
429/5xx before a stream starts; a stream that dies midway is the loop's to retry.

The SDK is imported, and its client made, at the first model call: importing it costs
~1.5-2.5 CPU-s here (thousands of pydantic models), which every process start would pay
(each CLI command, a server that never asks the model)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from server.agent.provider import ModelError, ModelRequest, ModelTurn, StreamCallbacks

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicProvider"]


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        base_url: str | None,
        timeout_s: float,
        max_retries: int,
    ) -> None:
        self.model = model
        self._options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": base_url,
            "timeout": timeout_s,
            "max_retries": max_retries,
        }
        self._client: anthropic.AsyncAnthropic | None = None

    def _sdk_client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            import anthropic  # here, not at the top: the module docstring says why

            self._client = anthropic.AsyncAnthropic(**self._options)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelTurn:
        client = self._sdk_client()
        import anthropic  # already loaded by _sdk_client: its exceptions
        from anthropic.types import RawMessageStreamEvent

        turn = _Accumulator(callbacks)
        try:
            params: dict[str, Any] = {
                "model": self.model,
                "max_tokens": request.max_tokens,
                "system": request.system,
                "messages": request.messages,
                "tools": request.tools,
            }
            if request.thinking_budget:
                params["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
            stream = cast(
                "anthropic.AsyncStream[RawMessageStreamEvent]",
                await client.messages.create(**params, stream=True),
            )
            async with stream:
                async for event in stream:
                    turn.feed(event.model_dump())
        except anthropic.APIStatusError as exc:
            status = exc.status_code
            raise ModelError(
                _message(exc), retryable=status == 429 or status >= 500, status_code=status
            ) from None
        except anthropic.APIError as exc:
            raise ModelError(f"model stream failed: {exc}", retryable=True) from None
        except Exception as exc:  # a connection that dies mid-stream surfaces from httpx
            raise ModelError(f"model stream failed: {exc}", retryable=True) from None
        return turn.finish()


def _message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return f"{exc.status_code} {error.get('type', 'error')}: {error['message']}"
    return f"{exc.status_code}: {exc.message}"


class _Accumulator:
    """Builds the assistant message from raw stream events."""

    def __init__(self, callbacks: StreamCallbacks) -> None:
        self._callbacks = callbacks
        self._message_id = ""
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self._stop_reason: str | None = None
        self._stopped = False
        self._malformed: dict[str, str] = {}

    def feed(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "message_start":
            self._message_id = event["message"]["id"]
            self._callbacks.on_start(self._message_id)
        elif kind == "content_block_start":
            self._start(event["index"], event["content_block"])
        elif kind == "content_block_delta":
            self._delta(event["index"], event["delta"])
        elif kind == "content_block_stop":
            self._stop(event["index"])
        elif kind == "message_delta":
            self._stop_reason = event["delta"].get("stop_reason") or self._stop_reason
        elif kind == "message_stop":
            self._stopped = True

    def _start(self, index: int, block: dict[str, Any]) -> None:
        if block["type"] == "text":
            self._blocks[index] = {"type": "text", "text": block.get("text", "")}
        elif block["type"] == "thinking":
            self._blocks[index] = {"type": "thinking", "thinking": "", "signature": ""}
        elif block["type"] == "redacted_thinking":
            # Encrypted thinking: nothing to show, but it goes back to the API as it came.
            self._blocks[index] = {"type": "redacted_thinking", "data": block["data"]}
        elif block["type"] == "tool_use":
            self._blocks[index] = {"type": "tool_use", "id": block["id"], "name": block["name"]}
            self._json[index] = ""
            self._callbacks.on_tool_start(block["id"], block["name"])

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        if delta["type"] == "text_delta" and index in self._blocks:
            self._blocks[index]["text"] += delta["text"]
            self._callbacks.on_text(delta["text"])
        elif delta["type"] == "thinking_delta" and index in self._blocks:
            self._blocks[index]["thinking"] += delta["thinking"]
            self._callbacks.on_reasoning(delta["thinking"])
        elif delta["type"] == "signature_delta" and index in self._blocks:
            self._blocks[index]["signature"] += delta["signature"]
        elif delta["type"] == "input_json_delta" and index in self._json:
            self._json[index] += delta["partial_json"]

    def _stop(self, index: int) -> None:
        block = self._blocks.get(index)
        if block is None or block["type"] != "tool_use":
            return
        raw = self._json.pop(index, "")
        try:
            value = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            value = None
            self._malformed[block["id"]] = f"the tool input was not valid JSON ({exc})"
        if value is not None and not isinstance(value, dict):
            self._malformed[block["id"]] = "the tool input must be a JSON object"
            value = None
        block["input"] = value if value is not None else {}

    def finish(self) -> ModelTurn:
        if not self._stopped:
            raise ModelError(
                "the model stream ended before the message was complete", retryable=True
            )
        content = [b for _, b in sorted(self._blocks.items()) if b["type"] != "text" or b["text"]]
        return ModelTurn(
            message_id=self._message_id,
            content=content,
            stop_reason=self._stop_reason or "end_turn",
            malformed=self._malformed,
        )
