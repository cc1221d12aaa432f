"""This process among the replicas of one deployment: several `instance-ai serve` processes
sharing one PostgreSQL database behave as one service.

* **Membership.** Each replica has a row in `replicas` and renews its `heartbeat_at` (database
  time, so clocks of different hosts never disagree) every `lease_s / 5`. A replica whose
  heartbeat is older than `lease_s` is dead: killed, hung, or cut off from the database.
  Whoever leads then ends its active runs (`on_dead`) and deletes its row. A replica that
  finds its own row gone was declared dead while it could not renew: it drops what it was
  driving (those runs were already ended) and joins again (`on_declared_dead`).
* **The link.** One dedicated connection `LISTEN`s on the event channel (the event log's
  fan-out, `server/runtime/events.py`) and the control channel (`ask`), and holds the leader
  lock. It reconnects with backoff; while it is down, live followers are refused.
* **Leadership.** Work that must happen once (the reaper, the sandbox janitor, confirmation
  timeouts) runs where `is_leader`: the holder of a session-level advisory lock taken on the
  link. PostgreSQL releases it when that session ends, however the process ends.
* **Asking the others.** `ask(op, args)` runs the handler of `op` here and on every other live
  replica (a `NOTIFY` on the control channel, replies likewise) and returns every answer, or
  what came in before the deadline: how `CancelRun` reaches the replica driving the run.

On SQLite the service is one process (its sandbox owner lease and the file's locking see to
that): this replica is the only live one and always the leader, and nothing is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import structlog
from sqlalchemy import ColumnElement, delete, func, insert, select, text, update
from sqlalchemy.engine import make_url

from server.core.ids import new_id
from server.errors import UnavailableError
from server.runtime.events import EVENTS_CHANNEL, MAX_BATCH, EventLog
from server.store import Database
from server.store.models import ReplicaRow

__all__ = ["CONTROL_CHANNEL", "Replicas", "open_replica"]

log = structlog.get_logger(__name__)

CONTROL_CHANNEL = "instance_ai_control"
# The session-level advisory lock whose holder leads (any fixed 64-bit number).
_LEADER_LOCK = 0x1A5E_A1_0002
# How long an `ask` waits for the other replicas' answers.
ASK_TIMEOUT_S = 5.0
_LINK_TIMEOUT_S = 10.0
_MAX_BACKOFF_S = 10.0

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
# Called with nothing: what happened is in the name it was registered under.
Hook = Callable[[], Awaitable[None]]


@dataclass(kw_only=True)
class _Gathering:
    """The answers to one `ask` as they come in."""

    waiting: set[str]
    answers: list[Any] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, replica: str, answer: Any) -> None:
        if replica in self.waiting:
            self.waiting.discard(replica)
            self.answers.append(answer)
        if not self.waiting:
            self.done.set()


class Replicas:
    """`await Replicas(db, url=...).start()`; `close()` leaves the membership."""

    def __init__(self, db: Database, *, url: str, lease_s: float) -> None:
        self.db = db
        self.id = new_id("replica")
        self.lease_s = lease_s
        self.heartbeat_s = max(lease_s / 5, 0.1)
        # Several processes can share only a database server (PostgreSQL), never SQLite.
        self.shared = not db.is_sqlite
        self._dsn = _asyncpg_dsn(url) if self.shared else ""
        self._handlers: dict[str, Handler] = {}
        self._gatherings: dict[str, _Gathering] = {}
        self._event_listeners: list[Callable[[str], None]] = []
        self._link_listeners: list[Callable[[bool], None]] = []
        self._dead_listeners: list[Hook] = []
        self._declared_dead_listeners: list[Hook] = []
        self._link: asyncpg.Connection | None = None
        self._link_lost: asyncio.Event | None = None
        self._link_ready = asyncio.Event()
        self._leader = not self.shared
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._answering: set[asyncio.Task[None]] = set()

    # -- wiring -------------------------------------------------------------------------

    def on_events(self, listener: Callable[[str], None]) -> None:
        """`listener(payload)` for every notification on the event channel."""
        self._event_listeners.append(listener)

    def on_link(self, listener: Callable[[bool], None]) -> None:
        """`listener(up)` each time the link comes up or goes down."""
        self._link_listeners.append(listener)

    def on_dead(self, listener: Hook) -> None:
        """On the leader, each heartbeat: `await listener()` ends what dead replicas left
        behind (what `owned_by_live` does not match)."""
        self._dead_listeners.append(listener)

    def on_declared_dead(self, listener: Hook) -> None:
        """When this replica learns the others declared it dead (its row was deleted)."""
        self._declared_dead_listeners.append(listener)

    def handle(self, op: str, handler: Handler) -> None:
        """Answer `op` (asked by this or another replica) with `await handler(args)`."""
        self._handlers[op] = handler

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        await self._join()
        if not self.shared:
            return
        self._tasks.append(asyncio.create_task(self._keep_link(), name="replica-link"))
        # Followers are refused until the link listens: give it a moment at start-up.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._link_ready.wait(), _LINK_TIMEOUT_S)
        self._tasks.append(asyncio.create_task(self._heartbeat(), name="replica-heartbeat"))

    async def close(self) -> None:
        self._closing = True
        for task in [*self._tasks, *self._answering]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._answering, return_exceptions=True)
        self._tasks.clear()
        with contextlib.suppress(Exception):  # the database may be gone: the lease lapses
            async with self.db.session() as session, session.begin():
                await session.execute(delete(ReplicaRow).where(ReplicaRow.id == self.id))

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def link_up(self) -> bool:
        """Whether notifications from the other replicas reach this one (always on SQLite)."""
        return not self.shared or self._link is not None

    async def alive(self) -> set[str]:
        """The ids of the live replicas, this one included."""
        if not self.shared:
            return {self.id}
        async with self.db.session() as session:
            rows = await session.scalars(select(ReplicaRow.id).where(self._fresh()))
            return set(rows) | {self.id}

    def owned_by_live(self, owner: ColumnElement[str | None]) -> ColumnElement[bool]:
        """A condition true where `owner` names a live replica, evaluated by the database in
        the same statement (a replica that joins and starts a run meanwhile is never taken
        for dead)."""
        if not self.shared:
            return owner == self.id
        return owner.in_(select(ReplicaRow.id).where(self._fresh()))

    def _fresh(self) -> ColumnElement[bool]:
        return ReplicaRow.heartbeat_at > func.now() - timedelta(seconds=self.lease_s)

    # -- asking the others ----------------------------------------------------------------

    async def ask(
        self, op: str, args: dict[str, Any], *, wait_s: float = ASK_TIMEOUT_S
    ) -> list[Any]:
        """Run `op` here and on every other live replica; this replica's answer comes first.
        A replica that does not answer in time is left out (it is dead or about to be
        declared so)."""
        answers = [await self._answer(op, args)]
        if not self.shared:
            return answers
        others = await self.alive() - {self.id}
        if not others:
            return answers
        if self._link is None:
            raise UnavailableError(
                "the other replicas cannot be reached (this replica's link to the database "
                "is down); try again"
            )
        nonce = new_id("ask")
        gathering = self._gatherings[nonce] = _Gathering(waiting=others)
        try:
            await self._send(
                CONTROL_CHANNEL,
                {"kind": "ask", "from": self.id, "id": nonce, "op": op, "args": args},
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gathering.done.wait(), wait_s)
        finally:
            del self._gatherings[nonce]
        if gathering.waiting:
            log.warning("replicas did not answer", op=op, replicas=sorted(gathering.waiting))
        return answers + gathering.answers

    async def _answer(self, op: str, args: dict[str, Any]) -> Any:
        handler = self._handlers.get(op)
        return await handler(args) if handler is not None else None

    async def _send(self, channel: str, message: dict[str, Any]) -> None:
        async with self.db.engine.begin() as conn:
            await conn.execute(
                text("SELECT pg_notify(:channel, :payload)"),
                {"channel": channel, "payload": json.dumps(message)},
            )

    def _heard_control(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        message = json.loads(payload)
        if message.get("from") == self.id:
            return
        if message.get("kind") == "ask":
            task = asyncio.create_task(self._answer_remote(message))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
        elif message.get("kind") == "answer" and message.get("to") == self.id:
            gathering = self._gatherings.get(message.get("id", ""))
            if gathering is not None:
                gathering.add(message["from"], message.get("answer"))

    async def _answer_remote(self, message: dict[str, Any]) -> None:
        try:
            answer = await self._answer(message["op"], message.get("args") or {})
        except Exception:
            log.exception("answering another replica failed", op=message.get("op"))
            answer = None
        reply = {"kind": "answer", "from": self.id, "to": message["from"], "id": message["id"]}
        try:
            await self._send(CONTROL_CHANNEL, reply | {"answer": answer})
        except Exception as exc:  # the asker stops waiting at its deadline
            log.warning("could not answer another replica", error=str(exc))

    # -- membership ---------------------------------------------------------------------

    async def _join(self) -> None:
        now = datetime.now(UTC)
        async with self.db.engine.begin() as conn:
            await conn.execute(
                insert(ReplicaRow).values(
                    id=self.id,
                    host=socket.gethostname()[:255],
                    pid=os.getpid(),
                    address="",
                    started_at=now,
                    heartbeat_at=func.now() if self.shared else now,
                )
            )

    async def advertise(self, address: str) -> None:
        """Record where this replica serves (for operators listing replicas)."""
        async with self.db.session() as session, session.begin():
            await session.execute(
                update(ReplicaRow).where(ReplicaRow.id == self.id).values(address=address[:255])
            )

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self._beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away: the lease lapses, others take over
                log.warning("replica heartbeat failed", error=str(exc)[:200])

    async def _beat(self) -> None:
        async with self.db.session() as session, session.begin():
            renewed = await session.execute(
                update(ReplicaRow).where(ReplicaRow.id == self.id).values(heartbeat_at=func.now())
            )
        if renewed.rowcount == 0:  # type: ignore[attr-defined]
            log.error("this replica was declared dead by the others; rejoining")
            for declared in self._declared_dead_listeners:
                await declared()
            await self._join()
        await self._lead()
        if self._leader:
            for listener in self._dead_listeners:
                await listener()
            async with self.db.session() as session, session.begin():
                await session.execute(delete(ReplicaRow).where(~self._fresh()))

    async def _lead(self) -> None:
        """Take the leader lock if free; check the link still answers either way."""
        link, lost = self._link, self._link_lost
        if link is None or lost is None:
            self._leader = False
            return
        try:
            got = await asyncio.wait_for(
                link.fetchval("SELECT pg_try_advisory_lock($1)", _LEADER_LOCK)
                if not self._leader
                else link.fetchval("SELECT true"),
                self.lease_s,
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            log.warning("the replica link stopped answering", error=str(exc)[:200])
            lost.set()
            self._leader = False
            return
        if got and not self._leader:
            log.info("this replica leads (janitor, reaper, confirmation timeouts)")
        self._leader = bool(got)

    # -- the link -----------------------------------------------------------------------

    async def _keep_link(self) -> None:
        backoff = 0.5
        while True:
            try:
                link = await asyncpg.connect(self._dsn, timeout=_LINK_TIMEOUT_S)
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.warning("the replica link cannot connect", error=str(exc)[:200])
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
                continue
            lost = asyncio.Event()
            link.add_termination_listener(_setter(lost))
            try:
                await link.add_listener(EVENTS_CHANNEL, self._heard_events)
                await link.add_listener(CONTROL_CHANNEL, self._heard_control)
                self._link, self._link_lost = link, lost
                backoff = 0.5
                await self._lead()  # settled before anyone is told the link is up
                self._announce(True)
                await lost.wait()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("the replica link failed", error=str(exc)[:200])
            finally:
                was_up = self._link is not None
                self._link = self._link_lost = None
                self._leader = False
                if was_up:
                    self._announce(False)
                link.terminate()

    def _announce(self, up: bool) -> None:
        if up:
            self._link_ready.set()
            log.info("replica link listening", replica=self.id)
        else:
            self._link_ready.clear()
            if not self._closing:
                log.warning("replica link lost; reconnecting", replica=self.id)
        for listener in self._link_listeners:
            listener(up)

    def _heard_events(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        for listener in self._event_listeners:
            listener(payload)


async def open_replica(
    db: Database,
    *,
    url: str,
    lease_s: float,
    subscriber_buffer: int = 4096,
    max_batch: int = MAX_BATCH,
) -> tuple[Replicas, EventLog]:
    """This process as a replica, with its event log: on PostgreSQL events travel through
    the database's notifications, so every replica's followers see every replica's events.
    Closes the database if it cannot start."""
    replicas = Replicas(db, url=url, lease_s=lease_s)
    events = EventLog(
        db=db,
        subscriber_buffer=subscriber_buffer,
        max_batch=max_batch,
        shared_as=replicas.id if replicas.shared else None,
    )
    events.start()
    replicas.on_events(events.heard)
    replicas.on_link(events.link_changed)
    try:
        await replicas.start()
    except BaseException:
        await events.close()
        await db.close()
        raise
    return replicas, events


def _setter(flag: asyncio.Event) -> Callable[[object], None]:
    return lambda _conn: flag.set()


def _asyncpg_dsn(url: str) -> str:
    """SQLAlchemy's `postgresql+asyncpg://…` URL as a plain libpq URL for asyncpg itself."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
