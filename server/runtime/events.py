"""The durable per-thread event log: the backbone every capability publishes to.

Two kinds of event share one stream:

* **durable** events get a per-thread id, strictly increasing, at append time. They are
  persisted *before* anyone sees them live, and are the only thing a reconnecting client
  replays. Ids come from `threads.last_event_id`, bumped in the same transaction that inserts
  the rows: a failed or interrupted append rolls back both, so there is never a gap and never
  a reused id.
* **live-only** events (token deltas, status) have no id, are never stored, and reach only the
  subscribers connected at that moment.

Appends go through one writer task that commits whatever is queued in one transaction (group
commit): many concurrent appenders cost one commit, not one each. After the commit the writer
hands the events to subscribers in id order, then resolves the appenders' futures.

A subscriber replays from the store, then registers for live delivery and replays once more,
dropping live events whose id it has already passed: nothing committed before registration is
missed (the second replay sees it) and nothing after it is missed (the live buffer gets it).
A subscriber's live buffer is bounded; a publisher never waits for a subscriber. One that
overflows is ended with `SubscriberLaggedError`, which says where to resume.

Replicas sharing a PostgreSQL database (`shared_as`) deliver differently: every event, live-only
ones included, leaves through the writer as a `NOTIFY` on `EVENTS_CHANNEL` (durable ones in the
transaction that stores them), and reaches followers — this replica's too — only as the
notification comes back. PostgreSQL delivers notifications in commit order, so every replica
sees a thread's events in id order; the hand-over above holds unchanged. While the link that
listens is down (`link_changed`), followers are ended and new ones refused: nothing is missed
without the follower knowing where to resume.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections import defaultdict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import structlog
from sqlalchemy import Row, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core.validation import check_thread_id
from server.errors import (
    InstanceAIError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    SubscriberLaggedError,
    UnavailableError,
)
from server.store import Database
from server.store.database import storage_failure
from server.store.models import EventRow
from server.store.threads import bump_event_counters, ensure_threads, get_thread

__all__ = ["EVENTS_CHANNEL", "ORCHESTRATOR", "Event", "EventLog"]

log = structlog.get_logger(__name__)

# The agent an event belongs to unless a background agent emits it: n8n's event contract
# gives every event an agent, the run's own events (run-start, run-finish) included.
ORCHESTRATOR = "orchestrator"

# Why a subscription ended, given the cursor the subscriber had reached.
EndReason = Callable[[int], InstanceAIError]

# Events committed in one transaction at the most; bounds a transaction's size and latency.
KNOWN_THREADS_MAX = 100_000
MAX_BATCH = 512
EVENTS = EventRow.metadata.tables["events"]
# Events read from the store per replay query.
REPLAY_PAGE = 500
# The notification channel of replicas sharing a PostgreSQL database.
EVENTS_CHANNEL = "instance_ai_events"
# PostgreSQL refuses a notification payload of 8,000 bytes or more; an event bigger than this
# travels as a reference the receivers read from the store.
NOTIFY_MAX = 7_500
# A tool call and each way it can end.
CALL_EVENTS = ("tool-call", "tool-result", "tool-error", "tool-interrupted")


@dataclass(frozen=True, kw_only=True)
class Event:
    """One event of a thread's stream; `id` is None for live-only events."""

    thread_id: str
    type: str
    payload: dict[str, Any]
    ts: datetime
    id: int | None = None
    run_id: str | None = None
    agent_id: str | None = None

    @property
    def durable(self) -> bool:
        return self.id is not None


@dataclass(kw_only=True)
class _PendingAppend:
    event: Event
    done: asyncio.Future[Event]


@dataclass(kw_only=True)
class _LiveNotice:
    """A live-only event on its way to the other replicas (shared mode)."""

    event: Event


_Queued = _PendingAppend | _LiveNotice


class _Subscription:
    """One follower's bounded buffer. Offering never blocks and never raises.

    While the follower is still replaying from the store (`live` false), an overflow only
    drops the buffer and sets `dropped`: the follower replays again and loses nothing durable.
    Once live, an overflow means the follower is too slow: it is ended as lagged."""

    def __init__(self, thread_id: str, capacity: int) -> None:
        self.thread_id = thread_id
        self.live = False
        self.dropped = False
        self._capacity = capacity
        self._items: deque[Event] = deque()
        self._ready = asyncio.Event()
        self._lagged = False
        self._closed: EndReason | None = None

    def offer(self, event: Event) -> None:
        if self._lagged or self._closed is not None:
            return
        if len(self._items) >= self._capacity:
            # Holding more would let one slow client grow memory without bound; the store
            # has every durable event, so the follower can always catch up from there.
            self._items.clear()
            if self.live:
                self._lagged = True
            else:
                self.dropped = True
        else:
            self._items.append(event)
        self._ready.set()

    def close(self, reason: EndReason) -> None:
        self._closed = reason
        self._ready.set()

    async def next(self, cursor: int) -> Event:
        """The next buffered event; raises when lagged or closed (after draining)."""
        while True:
            if self._lagged:
                raise SubscriberLaggedError(
                    f"this subscriber fell behind the live stream (more than {self._capacity} "
                    f"events buffered); reconnect with after={cursor}",
                    last_event_id=cursor,
                )
            if self._items:
                return self._items.popleft()
            if self._closed is not None:
                raise self._closed(cursor)
            self._ready.clear()
            await self._ready.wait()


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


_STOP = object()


@dataclass(kw_only=True)
class EventLog:
    """Append, publish and subscribe to per-thread event streams. Use as an async context
    manager, or call `start()` and `close()`."""

    db: Database
    subscriber_buffer: int = 4096
    # Events committed in one transaction at the most. A subscriber receives a whole batch
    # at once, so its buffer must hold at least one batch.
    max_batch: int = MAX_BATCH
    # This replica's id when replicas share the database (events then travel as
    # notifications; see the module's docstring); None for one process on its own.
    shared_as: str | None = None
    _queue: asyncio.Queue[_Queued | object] = field(default_factory=asyncio.Queue)
    _inbox: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    _receiver: asyncio.Task[None] | None = None
    _link_up: bool = False
    _subscribers: defaultdict[str, set[_Subscription]] = field(
        default_factory=lambda: defaultdict(set)
    )
    _writer: asyncio.Task[None] | None = None
    _state: _State = _State.NEW
    _live_ended: bool = False
    # Threads whose row this writer has seen: their appends skip the "create if missing"
    # statement. One deleted since is noticed by the counter update, and made again.
    _known_threads: set[str] = field(default_factory=set)

    async def __aenter__(self) -> EventLog:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def start(self) -> None:
        if self._state is not _State.NEW:
            raise RuntimeError("an EventLog cannot be restarted once closed")
        if self.subscriber_buffer < self.max_batch:
            raise ValueError(
                f"subscriber_buffer ({self.subscriber_buffer}) must hold at least one batch "
                f"({self.max_batch} events)"
            )
        self._writer = asyncio.create_task(self._write_loop(), name="event-log-writer")
        if self.shared_as is not None:
            self._receiver = asyncio.create_task(self._receive_loop(), name="event-log-receiver")
        self._state = _State.OPEN

    def end_live(self) -> None:
        """Refuse new live subscriptions and end current ones, telling each subscriber where
        to resume. Appends keep working: in-flight calls may still publish while draining."""
        self._live_ended = True
        self.end_subscriptions(_shutting_down)

    async def close(self) -> None:
        """End live delivery, commit what is queued, stop the writer. Idempotent."""
        if self._state is not _State.OPEN:
            self._state = _State.CLOSED
            return
        self.end_live()
        self._state = _State.CLOSED
        if self._receiver is not None:
            self._receiver.cancel()
            await asyncio.gather(self._receiver, return_exceptions=True)
        self._queue.put_nowait(_STOP)
        writer = self._writer
        if writer is None:
            return
        if not writer.done():
            await writer
        elif not writer.cancelled() and writer.exception() is not None:
            log.error("the event log writer had died", exc_info=writer.exception())

    # -- publishing ---------------------------------------------------------------------

    async def append(
        self,
        thread_id: str,
        type: str,
        payload: dict[str, Any] | None = None,
        *,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> Event:
        """Persist a durable event (creating the thread on its first event) and deliver it
        live. Returns the event with its id once it is committed."""
        if self._state is not _State.OPEN or self._writer is None or self._writer.done():
            # A dead writer would leave the caller waiting forever: refuse instead.
            raise UnavailableError("the event log is closed; the server is shutting down")
        check_thread_id(thread_id)
        event = _new_event(thread_id, type, payload, run_id=run_id, agent_id=agent_id)
        done: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_PendingAppend(event=event, done=done))
        return await done

    def publish_live(
        self,
        thread_id: str,
        type: str,
        payload: dict[str, Any] | None = None,
        *,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> Event:
        """Deliver a live-only event (no id, never stored) to current subscribers."""
        event = _new_event(thread_id, type, payload, run_id=run_id, agent_id=agent_id)
        if self.shared_as is None:
            self._fan_out(event)
        elif self._state is _State.OPEN:
            self._queue.put_nowait(_LiveNotice(event=event))
        return event

    # -- replicas -----------------------------------------------------------------------

    def heard(self, payload: str) -> None:
        """A notification on `EVENTS_CHANNEL` (from any replica, this one included)."""
        self._inbox.put_nowait(payload)

    def link_changed(self, up: bool) -> None:
        """The listening link came up or went down: followers cannot trust live delivery
        while it is down, so they are ended with where to resume."""
        self._link_up = up
        if not up:
            self.end_subscriptions(_link_lost)

    async def _receive_loop(self) -> None:
        while True:
            payload = await self._inbox.get()
            try:
                message = json.loads(payload)
            except ValueError:  # not ours: nothing else writes to the channel, but never die
                log.warning("an event notification was not JSON", size=len(payload))
                continue
            for item in message.get("events", []):
                thread_id = item["t"]
                if not self._subscribers.get(thread_id):
                    continue
                event = _from_wire(item) if "ref" not in item else None
                if event is None:
                    try:
                        event = await self._read(thread_id, item["ref"])
                    except Exception as exc:  # the store away: its followers resume later
                        log.warning("a shared event could not be read", error=str(exc)[:200])
                        self.end_subscriptions(_link_lost, thread_id=thread_id)
                        continue
                if event is not None:  # None: its thread was deleted meanwhile
                    self._fan_out(event)
            # Let followers drain before the next notification (as between two commits).
            await asyncio.sleep(0)

    async def _read(self, thread_id: str, event_id: int) -> Event | None:
        column = EVENTS.c
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(EVENTS).where(column.thread_id == thread_id, column.id == event_id)
                )
            ).first()
        return _from_row(row) if row is not None else None

    # -- subscribing --------------------------------------------------------------------

    async def last_event_id(self, thread_id: str) -> int:
        """The newest durable id of the thread (0 if none); NotFoundError if unknown."""
        async with self.db.session() as session:
            thread = await get_thread(session, thread_id)
        if thread is None:
            raise NotFoundError(f"thread {thread_id!r} does not exist")
        return thread.last_event_id

    async def subscribe(
        self, thread_id: str, *, after: int = 0, follow: bool = False
    ) -> AsyncGenerator[Event, None]:
        """Every durable event with id > `after`, then (with `follow`) live events until the
        subscription ends. Close the iterator (`contextlib.aclosing`) when done with it."""
        check_thread_id(thread_id)
        if after < 0:
            raise InvalidArgumentError("the cursor must be 0 or a positive event id")
        last_id = await self.last_event_id(thread_id)
        if after > last_id:
            raise OutOfRangeError(
                f"cursor {after} is past the newest event of thread {thread_id!r} ({last_id}); "
                f"resume with after={last_id} or less"
            )
        if not follow:
            async for event in self._replay(thread_id, after):
                yield event
            return
        self._check_followable(after)
        # Register before replaying, so live-only events published meanwhile are kept.
        subscription = _Subscription(thread_id, self.subscriber_buffer)
        self._subscribers[thread_id].add(subscription)
        cursor = after
        try:
            while True:
                subscription.dropped = False
                async for event in self._replay(thread_id, cursor):
                    cursor = event.id or cursor
                    yield event
                # Every event committed after this pass's query was offered after the reset
                # above; if none was dropped, the buffer holds them all and live can begin.
                if not subscription.dropped:
                    subscription.live = True
                    break
            while True:
                event = await subscription.next(cursor)
                if event.id is not None:
                    if event.id <= cursor:
                        continue  # already replayed
                    cursor = event.id
                yield event
        finally:
            self._forget(subscription)

    def _check_followable(self, after: int) -> None:
        if self._live_ended:
            raise _shutting_down(after)
        if self.shared_as is not None and not self._link_up:
            raise _link_lost(after)

    def end_subscriptions(self, reason: EndReason, thread_id: str | None = None) -> None:
        """End live subscriptions (of one thread, or all) with `reason`."""
        threads = [thread_id] if thread_id is not None else list(self._subscribers)
        for tid in threads:
            for subscription in list(self._subscribers.get(tid, ())):
                subscription.close(reason)

    def subscriber_count(self, thread_id: str) -> int:
        return len(self._subscribers.get(thread_id, ()))

    async def _replay(self, thread_id: str, after: int) -> AsyncIterator[Event]:
        cursor = after
        column = EVENTS.c
        while True:
            async with self.db.engine.connect() as conn:
                rows = await conn.execute(
                    select(EVENTS)
                    .where(column.thread_id == thread_id, column.id > cursor)
                    .order_by(column.id)
                    .limit(REPLAY_PAGE)
                )
                page = [_from_row(row) for row in rows]
            for event in page:
                yield event
            if len(page) < REPLAY_PAGE:
                return
            cursor = page[-1].id or cursor

    async def unfinished_tool_calls(self, thread_id: str, run_id: str) -> list[str]:
        """Tool calls of a run with a `tool-call` but no `tool-result`, `tool-error` or
        `tool-interrupted`."""
        column = EVENTS.c
        async with self.db.engine.connect() as conn:
            rows = await conn.execute(
                select(column.type, column.payload)
                .where(
                    column.thread_id == thread_id,
                    column.run_id == run_id,
                    column.type.in_(CALL_EVENTS),
                )
                .order_by(column.id)
            )
            open_calls: dict[str, None] = {}
            for kind, payload in rows:
                call_id = payload.get("toolCallId", "")
                if kind == "tool-call":
                    open_calls[call_id] = None
                else:
                    open_calls.pop(call_id, None)
        return list(open_calls)

    async def unfinished_direct_tool_calls(self) -> list[Event]:
        """`tool-call` events made outside any run (Tools.CallTool, background agents) that
        never got a `tool-result`, `tool-error` or `tool-interrupted`. Meaningful at start-up,
        when nothing can still be running them."""
        column = EVENTS.c
        async with self.db.engine.connect() as conn:
            rows = await conn.execute(
                select(EVENTS)
                .where(
                    column.run_id.is_(None),
                    column.type.in_(CALL_EVENTS),
                )
                .order_by(column.id)
            )
            open_calls: dict[tuple[str, str], Event] = {}
            for row in rows:
                event = _from_row(row)
                key = (event.thread_id, str(event.payload.get("toolCallId", "")))
                if event.type == "tool-call":
                    open_calls[key] = event
                else:
                    open_calls.pop(key, None)
        return list(open_calls.values())

    def _forget(self, subscription: _Subscription) -> None:
        subscribers = self._subscribers.get(subscription.thread_id)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscribers[subscription.thread_id]

    def _fan_out(self, event: Event) -> None:
        for subscription in list(self._subscribers.get(event.thread_id, ())):
            subscription.offer(event)

    # -- the writer ---------------------------------------------------------------------

    async def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            batch: list[_Queued] = []
            item = await self._queue.get()
            while True:
                if item is _STOP:
                    stopping = True
                elif isinstance(item, _PendingAppend | _LiveNotice):
                    batch.append(item)
                if stopping or len(batch) >= self.max_batch or self._queue.empty():
                    break
                item = self._queue.get_nowait()
            if batch:
                await self._commit_batch(batch)

    async def _commit_batch(self, batch: list[_Queued]) -> None:
        try:
            committed = await self._persist(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if len(batch) > 1:
                # One bad append must not fail its neighbours: retry each on its own.
                for pending in batch:
                    await self._commit_batch([pending])
                return
            failure = storage_failure(exc)
            thread_id = batch[0].event.thread_id
            if failure is not None:  # understood (disk full, read-only): no traceback
                log.warning("event append failed", thread_id=thread_id, error=str(failure))
            else:
                log.error("event append failed", thread_id=thread_id, exc_info=exc)
            pending = batch[0]
            if isinstance(pending, _PendingAppend) and not pending.done.done():
                pending.done.set_exception(
                    failure
                    or UnavailableError(f"the event could not be stored: {type(exc).__name__}")
                )
            return
        for pending, event in zip(batch, committed, strict=True):
            if self.shared_as is None:  # shared: delivered when the notification comes back
                self._fan_out(event)
            if isinstance(pending, _PendingAppend) and not pending.done.done():
                pending.done.set_result(event)

    async def _persist(self, batch: list[_Queued]) -> list[Event]:
        """Assign ids to the durable events and insert them, all in one transaction of a fixed
        number of statements however many threads the batch touches; in shared mode the
        same transaction notifies every event, live-only ones included, in queue order."""
        counts: dict[str, int] = defaultdict(int)
        for item in batch:
            if isinstance(item, _PendingAppend):
                counts[item.event.thread_id] += 1
        async with self.db.engine.begin() as conn:
            assigned = [item.event for item in batch]
            if counts:
                unknown = [tid for tid in counts if tid not in self._known_threads]
                if unknown:
                    await ensure_threads(conn, unknown)
                newest = await bump_event_counters(conn, counts)
                if len(newest) < len(counts):  # deleted since this writer saw them
                    gone = {tid: n for tid, n in counts.items() if tid not in newest}
                    await ensure_threads(conn, list(gone))
                    newest |= await bump_event_counters(conn, gone)
                if len(newest) < len(counts):
                    raise LookupError(f"threads vanished while appending: {sorted(counts)}")
                next_id = {tid: newest[tid] - counts[tid] + 1 for tid in counts}
                for index, item in enumerate(batch):
                    if isinstance(item, _PendingAppend):
                        thread_id = item.event.thread_id
                        assigned[index] = replace(item.event, id=next_id[thread_id])
                        next_id[thread_id] += 1
                durable = [e for e in assigned if e.id is not None]
                await conn.execute(insert(EVENTS), [_to_row(e) for e in durable])
            if self.shared_as is not None:
                await _notify(conn, self.shared_as, assigned)
        if len(self._known_threads) > KNOWN_THREADS_MAX:
            self._known_threads.clear()  # a bound on memory: forgotten ones are looked up again
        self._known_threads.update(counts)
        return assigned


def _shutting_down(cursor: int) -> InstanceAIError:
    return UnavailableError(f"the server is shutting down; reconnect with after={cursor}")


def _link_lost(cursor: int) -> InstanceAIError:
    return UnavailableError(
        "live events are not reaching this replica right now (its link to the database is "
        f"down); reconnect with after={cursor}"
    )


async def _notify(conn: AsyncConnection, origin: str, events: list[Event]) -> None:
    """`NOTIFY` the events in order, packed into as few payloads as fit."""
    payloads: list[list[str]] = [[]]
    size = 0
    for event in events:
        item = json.dumps(_to_wire(event), separators=(",", ":"))
        if len(item) > NOTIFY_MAX:
            if event.id is None:
                log.warning("a live event too large to share was dropped", type=event.type)
                continue
            item = json.dumps({"t": event.thread_id, "ref": event.id})
        if size + len(item) > NOTIFY_MAX and payloads[-1]:
            payloads.append([])
            size = 0
        payloads[-1].append(item)
        size += len(item) + 1
    for items in payloads:
        if items:
            payload = f'{{"from":{json.dumps(origin)},"events":[{",".join(items)}]}}'
            await conn.execute(
                text("SELECT pg_notify(:channel, :payload)"),
                {"channel": EVENTS_CHANNEL, "payload": payload},
            )


def _to_wire(event: Event) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "t": event.thread_id,
        "type": event.type,
        "payload": event.payload,
        "ts": event.ts.isoformat(),
    }
    for key, value in (("id", event.id), ("run", event.run_id), ("agent", event.agent_id)):
        if value is not None:
            wire[key] = value
    return wire


def _from_wire(item: dict[str, Any]) -> Event:
    return Event(
        thread_id=item["t"],
        type=item["type"],
        payload=item["payload"],
        ts=datetime.fromisoformat(item["ts"]),
        id=item.get("id"),
        run_id=item.get("run"),
        agent_id=item.get("agent") or ORCHESTRATOR,
    )


def _new_event(
    thread_id: str,
    type: str,
    payload: dict[str, Any] | None,
    *,
    run_id: str | None,
    agent_id: str | None,
) -> Event:
    payload = payload if payload is not None else {}
    try:
        # Fail the caller now, not the writer later: payloads must be plain JSON.
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"event payload is not JSON-serialisable: {exc}") from None
    return Event(
        thread_id=thread_id,
        type=type,
        payload=payload,
        ts=datetime.now(UTC),
        run_id=run_id,
        agent_id=agent_id or ORCHESTRATOR,
    )


def _to_row(event: Event) -> dict[str, Any]:
    return {
        "thread_id": event.thread_id,
        "id": event.id,
        "type": event.type,
        "run_id": event.run_id,
        "agent_id": event.agent_id,
        "ts": event.ts,
        "payload": event.payload,
    }


def _from_row(row: Row[Any]) -> Event:
    ts = row.ts if row.ts.tzinfo is not None else row.ts.replace(tzinfo=UTC)
    return Event(
        thread_id=row.thread_id,
        type=row.type,
        payload=row.payload,
        ts=ts,
        id=row.id,
        run_id=row.run_id,
        agent_id=row.agent_id or ORCHESTRATOR,
    )
