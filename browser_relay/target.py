"""What a page operation acts on: an element by its snapshot ref, or a CSS selector."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Target"]


@dataclass(frozen=True, kw_only=True)
class Target:
    ref: str | None = None
    selector: str | None = None
