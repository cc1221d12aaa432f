"""Rules for caller-supplied values, each failing with a message that says what to send."""

from __future__ import annotations

import re

from server.errors import InvalidArgumentError, ResourceExhaustedError

__all__ = ["THREAD_ID_PATTERN", "check_chat_message", "check_thread_id", "parse_cursor"]

THREAD_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_CURSOR_PATTERN = re.compile(r"[0-9]{1,18}")


def check_thread_id(thread_id: str) -> str:
    if not THREAD_ID_PATTERN.fullmatch(thread_id):
        raise InvalidArgumentError(
            f"thread id {_shorten(thread_id)!r} is not valid: use 1-128 characters of "
            "A-Z a-z 0-9 . _ : -"
        )
    return thread_id


def parse_cursor(cursor: str) -> int:
    """An event cursor: the decimal id of the last event the client has; empty means 0."""
    text = cursor.strip()
    if not text:
        return 0
    if not _CURSOR_PATTERN.fullmatch(text):
        raise InvalidArgumentError(
            f"cursor {_shorten(cursor)!r} is not an event id: send the decimal id of the last "
            "event you received, or leave it empty for the whole history"
        )
    return int(text)


def check_chat_message(message: str, *, max_chars: int, setting: str) -> str:
    if not message.strip():
        raise InvalidArgumentError("the message is empty: send the user's text")
    if len(message) > max_chars:
        raise ResourceExhaustedError(
            f"the message has {len(message)} characters; the limit is {max_chars} ({setting}): "
            "shorten it, or write long material to a workspace file and refer to it"
        )
    return message


def _shorten(value: str) -> str:
    return value if len(value) <= 40 else value[:40] + "..."
