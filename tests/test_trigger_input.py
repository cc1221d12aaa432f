"""Trigger input shapes, one per trigger type, as the reference feeds them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from server.errors import InvalidArgumentError
from server.pipeline.trigger_input import shape_trigger_input

NOW = datetime(2026, 12, 2, 15, 4, 5, tzinfo=UTC)


def shaped(trigger: str, data: Any) -> tuple[dict[str, Any], str]:
    result = shape_trigger_input(trigger, data, now=NOW)
    return result.item, result.mode


def test_chat_takes_a_string_a_chat_input_or_the_json_of_anything_else() -> None:
    item, mode = shaped("@n8n/n8n-nodes-langchain.chatTrigger", "where is A-7?")
    assert mode == "chat"
    assert item == {
        "sessionId": f"instance-ai-{int(NOW.timestamp() * 1000)}",
        "action": "sendMessage",
        "chatInput": "where is A-7?",
    }
    assert (
        shaped("@n8n/n8n-nodes-langchain.chatTrigger", {"chatInput": "hi"})[0]["chatInput"] == "hi"
    )
    assert shaped("@n8n/n8n-nodes-langchain.chatTrigger", {"a": 1})[0]["chatInput"] == '{"a": 1}'


def test_form_fields_are_flat_with_the_submission_stamp() -> None:
    item, mode = shaped("n8n-nodes-base.formTrigger", {"email": "a@example.com"})
    assert mode == "trigger"
    assert item == {
        "submittedAt": NOW.isoformat(),
        "formMode": "instanceAi",
        "email": "a@example.com",
    }
    with pytest.raises(InvalidArgumentError, match="not wrapped in formFields"):
        shaped("n8n-nodes-base.formTrigger", {"formFields": {"email": "a@example.com"}})


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # An envelope (keys within body/headers/query/params) is taken as one.
        (
            {"body": {"id": 1}, "headers": {"x-key": "k"}},
            {"headers": {"x-key": "k"}, "query": {}, "params": {}, "body": {"id": 1}},
        ),
        # Anything else is the body.
        (
            {"id": 1, "body": "text"},
            {"headers": {}, "query": {}, "params": {}, "body": {"id": 1, "body": "text"}},
        ),
        (None, {"headers": {}, "query": {}, "params": {}, "body": {}}),
    ],
)
def test_webhook_envelope_detection(data: Any, expected: dict[str, Any]) -> None:
    assert shaped("n8n-nodes-base.webhook", data) == (expected, "webhook")


def test_schedule_carries_the_time_in_readable_parts() -> None:
    item, mode = shaped("n8n-nodes-base.scheduleTrigger", {"ignored": True})
    assert mode == "trigger"
    assert item == {
        "timestamp": NOW.isoformat(),
        "Readable date": "December 2nd 2026, 3:04:05 pm",
        "Day of week": "Wednesday",
        "Year": "2026",
        "Month": "December",
        "Day of month": "02",
        "Hour": "15",
        "Minute": "04",
        "Second": "05",
    }


def test_other_triggers_get_the_input_itself() -> None:
    assert shaped("n8n-nodes-base.manualTrigger", {"orderId": "A-1"}) == (
        {"orderId": "A-1"},
        "manual",
    )
    assert shaped("n8n-nodes-base.manualTrigger", None) == ({}, "manual")
