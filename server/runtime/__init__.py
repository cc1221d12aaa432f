"""The runtime: the durable per-thread event log, threads and runs."""

from __future__ import annotations

from dataclasses import dataclass

from server.runtime.events import Event, EventLog
from server.runtime.sandboxes import SandboxService
from server.runtime.threads import Threads, ThreadStatus
from server.settings import Settings
from server.store import Database

__all__ = ["Event", "EventLog", "Runtime", "SandboxService", "ThreadStatus", "Threads"]


@dataclass(kw_only=True)
class Runtime:
    """What the servicers call into: one per server process."""

    settings: Settings
    db: Database
    events: EventLog
    threads: Threads
    sandboxes: SandboxService

    @classmethod
    async def open(cls, settings: Settings) -> Runtime:
        db = await Database.open(settings.resolved_database_url)
        events = EventLog(db=db, subscriber_buffer=settings.subscriber_buffer)
        events.start()
        sandboxes = SandboxService(settings, db)
        await sandboxes.start()
        threads = Threads(db=db, events=events, on_deleted=sandboxes.destroy)
        return cls(settings=settings, db=db, events=events, threads=threads, sandboxes=sandboxes)

    async def close(self) -> None:
        await self.sandboxes.close()
        await self.events.close()
        await self.db.close()
