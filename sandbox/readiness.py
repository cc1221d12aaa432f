"""How ready the warm pool's members are made, from what the traffic does with them.

A pool member is warmed either **to build** (its worker, esbuild's service and the compile
thread with the workflow SDK loaded) or **to build and verify** (the engine thread with n8n-core
loaded too, which costs about as much again). A thread that only edits and builds never needs the
engine; one that runs a workflow loads it on its first run if its sandbox lacks it.

So the pool is split by measurement, not by a setting: of the last `window` claimed sandboxes,
the share that went on to use the engine (a run, a node's resource lookup, resolved parameters)
is how many of the members are warmed with it. The estimate is Laplace's rule of succession,
(used + 1) / (claims + 2): one half before anything is known, the traffic's own share soon after.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["ENGINE_OPS", "Claim", "Readiness", "ReadinessMix"]

# The in-sandbox operations that run on the engine thread (ops.mjs).
ENGINE_OPS = frozenset({"execute", "nodeResources", "resolveParameters"})


class Readiness(StrEnum):
    BUILD = "build"
    VERIFY = "verify"


@dataclass(kw_only=True)
class Claim:
    """One claimed pool sandbox: whether its thread has used the engine yet."""

    used_engine: bool = False


class ReadinessMix:
    def __init__(self, *, window: int = 50) -> None:
        self._claims: deque[Claim] = deque(maxlen=window)

    def claimed(self) -> Claim:
        """Record a claim; mark the returned Claim when its sandbox first uses the engine."""
        claim = Claim()
        self._claims.append(claim)
        return claim

    @property
    def engine_share(self) -> float:
        used = sum(claim.used_engine for claim in self._claims)
        return (used + 1) / (len(self._claims) + 2)

    def next_member(self, *, pool_size: int, ready_to_verify: int) -> Readiness:
        """The readiness of the next member to warm, given how many of the pool's current
        members are ready to verify."""
        wanted = round(pool_size * self.engine_share)
        return Readiness.VERIFY if ready_to_verify < wanted else Readiness.BUILD

    def snapshot(self) -> dict[str, float | int]:
        return {
            "claims": len(self._claims),
            "usedEngine": sum(claim.used_engine for claim in self._claims),
            "engineShare": round(self.engine_share, 3),
        }
