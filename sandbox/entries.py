"""What the manager holds of one sandbox it has taken up (a thread's, or a pool member)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from sandbox.engine import ContainerInfo
from sandbox.readiness import Claim, Readiness
from sandbox.worker import WorkerClient

__all__ = ["SandboxEntry"]


@dataclass(kw_only=True)
class SandboxEntry:
    container: ContainerInfo
    last_used: float
    running_commands: int = 0
    worker: WorkerClient | None = None
    # Held while the worker is started: one channel at a time (the runsc engine's worker has
    # one), and a connection made beside a command is kept referenced here.
    worker_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    connecting: asyncio.Task[None] | None = None
    # A pool member's: what it was warmed for; once claimed, its claim in the readiness mix.
    readiness: Readiness | None = None
    claim: Claim | None = None

    def drop_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    async def let_go_of_worker(self) -> None:
        """`drop_worker`, after a connection made beside a command has finished (else it
        would hold the worker's channel after this returns)."""
        if self.connecting is not None:
            with contextlib.suppress(Exception):
                await self.connecting
        self.drop_worker()
