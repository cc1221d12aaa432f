"""Engine calls block (Docker's HTTP API, runsc's command line, the worker's channel): the
manager and its rooms run each in a worker thread, off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["in_thread"]

T = TypeVar("T")


async def in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking engine call in a worker thread (the engine translates its own faults
    into SandboxUnavailableError)."""
    return await asyncio.to_thread(function, *args, **kwargs)
