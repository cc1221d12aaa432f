"""One model request whose answer is a JSON object of a given schema: the model is offered a
single `answer` tool with that schema and must call it. Used where the service itself asks
the model something (the simulation plan's pass), not in a conversation."""

from __future__ import annotations

from typing import Any

from server.agent.provider import ModelError, ModelProvider, ModelRequest, StreamCallbacks
from server.pipeline.judgement import AskModel

__all__ = ["ANSWER_TOOL", "structured_asker"]

ANSWER_TOOL = "answer"
_QUIET = StreamCallbacks(
    on_start=lambda _id: None,
    on_text=lambda _text: None,
    on_tool_start=lambda _id, _name: None,
    on_reasoning=lambda _text: None,
)


def structured_asker(provider: ModelProvider, *, max_tokens: int) -> AskModel:
    """An `AskModel` (server/pipeline/judgement.py) over `provider`."""

    async def ask(instructions: str, prompt: str, schema: dict[str, Any]) -> dict[str, Any]:
        turn = await provider.complete(
            ModelRequest(
                system=instructions,
                messages=[{"role": "user", "content": [{"type": "text", "text": prompt}]}],
                tools=[
                    {
                        "name": ANSWER_TOOL,
                        "description": "Give your answer (the only way to answer).",
                        "input_schema": schema,
                    }
                ],
                max_tokens=max_tokens,
            ),
            _QUIET,
        )
        for block in turn.tool_uses:
            if block["name"] == ANSWER_TOOL and isinstance(block.get("input"), dict):
                return dict(block["input"])
        raise ModelError("the model answered without calling the answer tool", retryable=False)

    return ask
