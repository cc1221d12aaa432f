"""Which engine a sandbox lives on: rendezvous (highest random weight) hashing.

Every engine gets a score from a hash of its name and the sandbox id; the highest wins. Any
process that knows the same engines picks the same one, with no coordination, and when an
engine goes away only the sandboxes that were on it move (each to its next-ranked engine).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["rank"]


def rank(engines: Iterable[str], sandbox_id: str) -> list[str]:
    """The engines in order of preference for `sandbox_id` (best first)."""
    return sorted(engines, key=lambda name: _score(name, sandbox_id), reverse=True)


def _score(engine: str, sandbox_id: str) -> bytes:
    return hashlib.sha256(f"{engine}\0{sandbox_id}".encode()).digest()
