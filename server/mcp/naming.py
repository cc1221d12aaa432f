"""Tool names for tools that come from MCP: valid for every model provider, unique, and
never shadowing one of the service's own tools (compared the way a person would confuse
them: case and punctuation ignored)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

__all__ = ["MAX_NAME", "NameClaims", "normalized"]

MAX_NAME = 64
_VALID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def normalized(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class NameClaims:
    """The names taken so far (the service's tools first), normalised."""

    def __init__(self, reserved: Iterable[str]) -> None:
        self._taken = {normalized(name) for name in reserved}

    def claim_exact(self, name: str) -> str | None:
        """`name` itself if it is valid and free (a gateway's tools keep their names), else
        None: the tool is skipped."""
        if not _VALID.fullmatch(name) or normalized(name) in self._taken:
            return None
        self._taken.add(normalized(name))
        return name

    def claim_prefixed(self, server: str, tool: str) -> str:
        """`<server>__<tool>` made valid; too long or already taken → shortened and given a
        digest of the original, so the same tool always gets the same name."""
        name = f"{server}__{_UNSAFE.sub('_', tool)}"
        if len(name) > MAX_NAME or normalized(name) in self._taken or not _VALID.match(name):
            digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
            name = f"{name[: MAX_NAME - 9]}_{digest}"
        self._taken.add(normalized(name))
        return name
