"""The history window sent to the model: trimmed at turn boundaries, tool calls always
answered."""

from __future__ import annotations

from typing import Any

from server.runtime.conversation import estimate_tokens, repair, trim
from tests.fake_model import message_problem


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def call(call_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": call_id, "name": "t", "input": {}}],
    }


def result(call_id: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}],
    }


def test_trim_keeps_the_newest_whole_turns_within_the_budget() -> None:
    turns = [
        user("a" * 400),
        call("c1"),
        result("c1"),
        user("b" * 400),
        call("c2"),
        result("c2"),
        user("c"),
    ]
    budget = sum(estimate_tokens(m) for m in turns[3:])
    window = trim(turns, budget)
    assert window == turns[3:]  # starts at a user text message, never at a tool result
    assert message_problem(window) is None
    assert trim(turns, 1) == [turns[-1]]  # the newest turn always goes
    assert trim(turns, 10**9) == turns


def test_repair_answers_calls_left_without_results() -> None:
    cut = [user("go"), call("c1"), user("what happened?")]
    repaired = repair(cut)
    assert message_problem(cut) is not None
    assert message_problem(repaired) is None
    first = repaired[2]["content"][0]
    assert (first["type"], first["tool_use_id"], first["is_error"]) == ("tool_result", "c1", True)
    assert repaired[2]["content"][1] == {"type": "text", "text": "what happened?"}
    dangling = repair([user("go"), call("c2")])
    assert dangling[-1]["content"][0]["tool_use_id"] == "c2"
    whole = [user("go"), call("c3"), result("c3")]
    assert repair(whole) == whole
