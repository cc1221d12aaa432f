"""Waiting for something to happen, in tests: a poll with a generous deadline, never a fixed
sleep or a count of tries. On a busy machine (both cores running the suite) a process takes
seconds to start; the deadline only bounds a wait for what never comes, and says what it was."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DEADLINE_S", "until"]

DEADLINE_S = 120.0


async def until(
    check: Callable[[], Any],
    what: str,
    *,
    within_s: float = DEADLINE_S,
    every_s: float = 0.05,
) -> Any:
    """Call `check` (a function, or a coroutine function) until it returns something other
    than None or False, and return that; fail with `what` once `within_s` have passed."""
    deadline = time.monotonic() + within_s
    while True:
        found = check()
        if inspect.isawaitable(found):
            found = await found
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within_s:.0f} s")
        await asyncio.sleep(every_s)
