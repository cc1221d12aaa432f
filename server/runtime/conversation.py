"""A thread's conversation with the model: messages in the Messages API shape, kept in order,
and the window of them that fits a request's token budget."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select

from server.store import Database
from server.store.models import MessageRow
from server.store.threads import ensure_threads

__all__ = ["CHARS_PER_TOKEN", "Conversation", "Message", "estimate_tokens", "repair", "trim"]

Message = dict[str, Any]
# A rough, provider-independent estimate; trimming only needs to be on the safe side.
CHARS_PER_TOKEN = 4


def estimate_tokens(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False)) // CHARS_PER_TOKEN + 1


@dataclass(kw_only=True)
class Conversation:
    db: Database

    async def append(self, thread_id: str, run_id: str | None, messages: list[Message]) -> None:
        now = datetime.now(UTC)
        async with self.db.engine.begin() as conn:
            await ensure_threads(conn, [thread_id])
            await conn.execute(
                insert(MessageRow),
                [
                    {
                        "thread_id": thread_id,
                        "run_id": run_id,
                        "role": m["role"],
                        "content": m["content"],
                        "created_at": now,
                    }
                    for m in messages
                ],
            )

    async def is_empty(self, thread_id: str) -> bool:
        async with self.db.session() as session:
            found = await session.execute(
                select(MessageRow.seq).where(MessageRow.thread_id == thread_id).limit(1)
            )
            return found.first() is None

    async def load(self, thread_id: str) -> list[Message]:
        async with self.db.session() as session:
            rows = await session.execute(
                select(MessageRow.role, MessageRow.content)
                .where(MessageRow.thread_id == thread_id)
                .order_by(MessageRow.seq)
            )
            return [{"role": role, "content": content} for role, content in rows]

    async def window(self, thread_id: str, *, token_budget: int) -> list[Message]:
        return trim(await self.load(thread_id), token_budget)


def trim(messages: list[Message], token_budget: int) -> list[Message]:
    """The newest messages that fit the budget, starting at a user message that is not a tool
    result (so every tool result keeps its tool call). The newest turn is always kept."""
    starts = [i for i, m in enumerate(messages) if _opens_turn(m)]
    if not starts:
        return messages
    sizes = [estimate_tokens(m) for m in messages]
    suffix = [0] * (len(messages) + 1)
    for i in range(len(messages) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + sizes[i]
    first = starts[-1]
    for start in reversed(starts):
        if suffix[start] > token_budget:
            break
        first = start
    return messages[first:]


def _opens_turn(message: Message) -> bool:
    if message["role"] != "user":
        return False
    content = message["content"]
    if isinstance(content, str):
        return True
    return not any(block.get("type") == "tool_result" for block in content)


def repair(messages: list[Message]) -> list[Message]:
    """The history with every tool call answered: a call whose result never arrived (the
    process died between the two) gets an error result at the head of the next user message,
    as the Messages API requires."""
    out: list[Message] = []
    owed: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if owed and message["role"] == "user":
            message = {"role": "user", "content": owed + _blocks(message)}
            owed = []
        elif owed:
            out.append({"role": "user", "content": owed})
            owed = []
        out.append(message)
        if message["role"] != "assistant" or isinstance(message["content"], str):
            continue
        following = messages[index + 1] if index + 1 < len(messages) else None
        answered = _result_ids(following)
        owed = [
            {
                "type": "tool_result",
                "tool_use_id": block["id"],
                "content": "No result: the run stopped before this call finished.",
                "is_error": True,
            }
            for block in message["content"]
            if block.get("type") == "tool_use" and block["id"] not in answered
        ]
    if owed:
        out.append({"role": "user", "content": owed})
    return out


def _result_ids(message: Message | None) -> set[str]:
    if message is None or message["role"] != "user" or isinstance(message["content"], str):
        return set()
    return {b["tool_use_id"] for b in message["content"] if b.get("type") == "tool_result"}


def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
