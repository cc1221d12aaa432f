"""A new thread's title (n8n's `thread-title-updated`), from its first message: its words,
whitespace folded, cut at a word boundary. Made without a model call, so every new thread
gets one at once."""

from __future__ import annotations

__all__ = ["TITLE_MAX", "thread_title"]

TITLE_MAX = 60


def thread_title(message: str) -> str:
    words = " ".join(message.split())
    if not words:
        return "New conversation"
    if len(words) <= TITLE_MAX:
        return words
    cut = words[:TITLE_MAX].rsplit(" ", 1)[0] or words[:TITLE_MAX]
    return cut.rstrip(",.;:-") + "…"
