"""Secrets the browser tools took off a page, held for the credential they are captured for,
and the redaction that keeps them (and anything secret-shaped) out of what the model sees.

Per thread: the captured fields of each pending credential (`credentialsKey` → field → value)
and the markers handed out in place of secrets (`[REDACTED:openai_api_key:1]`), so the model
can name a secret it was shown only as a marker (`browser_capture_secret {redactedKey}`).
Everything lives in this process's memory only, never in the database, an event or a log, and
is dropped after `idle_seconds` without use. Nothing here renders a value: `repr` counts."""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from server.domain.secret_scan import find_secrets

__all__ = ["MARKER", "CapturedSecrets", "has_marker"]

# What a redaction marker looks like (and what a captured value must not be).
MARKER = re.compile(r"\[REDACTED:[A-Za-z0-9_.-]+(?::\d+)?\]")
# Secrets shorter than this are not searched for in results (they would hit ordinary text).
MIN_REDACTED_LENGTH = 6


def has_marker(text: str) -> bool:
    return MARKER.search(text) is not None


@dataclass
class _Thread:
    # credentialsKey → field → value
    fields: dict[str, dict[str, str]] = field(default_factory=dict)
    # marker → value, and value → marker (one marker per value in a thread)
    markers: dict[str, str] = field(default_factory=dict)
    marked: dict[str, str] = field(default_factory=dict)
    numbered: int = 0
    touched: float = field(default_factory=time.monotonic)

    def __repr__(self) -> str:
        return f"_Thread(credentials={len(self.fields)}, markers={len(self.markers)})"


class CapturedSecrets:
    def __init__(
        self, *, idle_seconds: float = 3600, max_threads: int = 1000, max_markers: int = 500
    ) -> None:
        self.idle_seconds = idle_seconds
        self.max_threads = max_threads
        self.max_markers = max_markers
        self._threads: OrderedDict[str, _Thread] = OrderedDict()

    def __repr__(self) -> str:
        return f"CapturedSecrets(threads={len(self._threads)})"

    # -- the pending credentials ---------------------------------------------------------

    def capture(self, thread_id: str, key: str, name: str, value: str) -> list[str]:
        """Keep `value` as field `name` of the credential `key`; the fields it now has."""
        found = self._thread(thread_id, create=True)
        assert found is not None
        fields = found.fields.setdefault(key, {})
        fields[name] = value
        self._mark(found, "captured_secret", value)
        return sorted(fields)

    def fields(self, thread_id: str, key: str) -> dict[str, str] | None:
        """The captured values of credential `key` (for creating it; never for a result)."""
        found = self._thread(thread_id)
        return None if found is None else found.fields.get(key)

    def field_names(self, thread_id: str, key: str) -> list[str]:
        return sorted(self.fields(thread_id, key) or {})

    def clear(self, thread_id: str, key: str) -> None:
        """Forget credential `key`'s fields (its values stay redacted where they show up)."""
        found = self._thread(thread_id)
        if found is not None:
            found.fields.pop(key, None)

    def forget(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)

    # -- markers and redaction -----------------------------------------------------------

    def value_of(self, thread_id: str, marker: str) -> str | None:
        """The secret a marker stands for in this thread, if it was handed out here."""
        found = self._thread(thread_id)
        return None if found is None else found.markers.get(marker.strip())

    def redact(
        self, thread_id: str, value: Any, found: Iterable[tuple[str, str]] = ()
    ) -> tuple[Any, int]:
        """`value` (a result: strings, lists, dicts) with every secret in it replaced by its
        marker: the thread's captured values and earlier marked ones, `found` (kind, value)
        pairs the caller spotted on the page, and whatever is secret-shaped. Returns it with
        the number of replacements."""
        strings = list(_strings(value))
        hits = [(k, v) for k, v in found if len(v) >= MIN_REDACTED_LENGTH]
        for text in strings:
            hits += find_secrets(text)
        thread = self._thread(thread_id, create=bool(hits))
        known = dict(thread.marked) if thread is not None else {}
        for kind, secret in hits:
            if thread is not None and secret not in known and any(secret in s for s in strings):
                known[secret] = self._mark(thread, kind, secret)
        present = {
            secret: marker
            for secret, marker in known.items()
            if len(secret) >= MIN_REDACTED_LENGTH and any(secret in s for s in strings)
        }
        if not present:
            return value, 0
        # Longest first: a secret inside a longer one leaves no part of the longer behind.
        ordered = sorted(present.items(), key=lambda item: -len(item[0]))
        count = sum(s.count(secret) for secret, _ in ordered for s in strings)
        return _replace(value, ordered), count

    def contains_secret(self, thread_id: str, text: str) -> bool:
        """Whether `text` holds a captured or marked value of the thread, or a secret shape."""
        found = self._thread(thread_id)
        known = found.marked if found is not None else {}
        return bool(find_secrets(text)) or any(
            len(secret) >= MIN_REDACTED_LENGTH and secret in text for secret in known
        )

    def scrub_text(self, thread_id: str, text: str) -> str:
        """`text` (an error message, say) with the thread's known secrets replaced."""
        scrubbed, _ = self.redact(thread_id, text)
        return str(scrubbed)

    # -- internals -----------------------------------------------------------------------

    def _mark(self, thread: _Thread, kind: str, secret: str) -> str:
        marker = thread.marked.get(secret)
        if marker is None:
            if len(thread.markers) >= self.max_markers:
                oldest = next(iter(thread.markers))
                thread.marked.pop(thread.markers.pop(oldest), None)
            thread.numbered += 1
            marker = f"[REDACTED:{kind}:{thread.numbered}]"
            thread.markers[marker] = secret
            thread.marked[secret] = marker
        return marker

    def _thread(self, thread_id: str, *, create: bool = False) -> _Thread | None:
        now = time.monotonic()
        for stale in [t for t, v in self._threads.items() if now - v.touched > self.idle_seconds]:
            del self._threads[stale]
        found = self._threads.get(thread_id)
        if found is None and create:
            found = self._threads[thread_id] = _Thread()
            while len(self._threads) > self.max_threads:
                self._threads.popitem(last=False)
        if found is not None:
            found.touched = now
            self._threads.move_to_end(thread_id)
        return found


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield str(key)
            yield from _strings(sub)
    elif isinstance(value, list | tuple):
        for sub in value:
            yield from _strings(sub)


def _replace(value: Any, ordered: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for secret, marker in ordered:
            value = value.replace(secret, marker)
        return value
    if isinstance(value, dict):
        return {_replace(k, ordered): _replace(v, ordered) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_replace(v, ordered) for v in value]
    return value
