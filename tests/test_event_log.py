"""The durable event log, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest
from sqlalchemy import select, text

from server.errors import (
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    SubscriberLaggedError,
    UnavailableError,
)
from server.runtime.events import REPLAY_PAGE, Event, EventLog
from server.store import Database
from server.store.models import EventRow, ThreadRow


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = await Database.open(database_url)
    yield database
    await database.close()


@pytest.fixture
async def log(db: Database) -> AsyncIterator[EventLog]:
    async with EventLog(db=db) as event_log:
        yield event_log


async def stored_ids(db: Database, thread_id: str) -> list[int]:
    async with db.session() as session:
        rows = await session.execute(
            select(EventRow.id).where(EventRow.thread_id == thread_id).order_by(EventRow.id)
        )
        return list(rows.scalars())


async def collect(stream: AsyncIterator[Event], count: int) -> list[Event]:
    events: list[Event] = []
    async for event in stream:
        events.append(event)
        if len(events) == count:
            break
    return events


async def test_concurrent_appends_get_strictly_increasing_gapless_ids(log: EventLog) -> None:
    events = await asyncio.gather(*(log.append("t1", "tick", {"n": n}) for n in range(300)))
    ids = [event.id for event in events]
    # Submission order is id order, and the ids are exactly 1..300.
    assert ids == list(range(1, 301))
    assert [event.payload["n"] for event in events] == list(range(300))


async def test_a_thread_deleted_under_the_writer_is_made_again_and_its_ids_start_over(
    log: EventLog, db: Database
) -> None:
    """The writer remembers which threads exist; one deleted since (rows gone from under
    it) is noticed and made again, in the same batch as a thread that still exists."""
    for thread_id in ("gone", "kept"):
        for n in range(3):
            await log.append(thread_id, "tick", {"n": n})
    async with db.engine.begin() as conn:
        await conn.execute(text("DELETE FROM events WHERE thread_id = 'gone'"))
        await conn.execute(text("DELETE FROM threads WHERE id = 'gone'"))
    again = await asyncio.gather(
        log.append("gone", "tick", {"n": 9}),
        log.append("kept", "tick", {"n": 9}),
        log.append("gone", "tick", {"n": 10}),
    )
    assert [(e.thread_id, e.id) for e in again] == [("gone", 1), ("kept", 4), ("gone", 2)]
    assert await stored_ids(db, "gone") == [1, 2]
    assert await stored_ids(db, "kept") == [1, 2, 3, 4]


async def test_two_processes_sharing_a_database_never_share_an_id(
    database_url: str, db: Database
) -> None:
    """Ids come from the database, not from process memory: two logs (as two replicas would
    be) appending to one thread at once still produce one gapless sequence."""
    second_db = await Database.open(database_url)
    try:
        async with EventLog(db=db) as first, EventLog(db=second_db) as second:
            results = await asyncio.gather(
                *(
                    log.append("shared", "tick", {"n": n})
                    for n in range(150)
                    for log in (first, second)
                )
            )
    finally:
        await second_db.close()
    ids = sorted(event.id for event in results if event.id is not None)
    assert ids == list(range(1, 301))
    assert await stored_ids(db, "shared") == ids


async def test_replay_returns_exactly_the_events_after_the_cursor(log: EventLog) -> None:
    for n in range(10):
        await log.append("t1", "step", {"n": n}, run_id="run_1", agent_id="orchestrator")
    async with aclosing(log.subscribe("t1", after=4)) as stream:
        replayed = [event async for event in stream]
    assert [event.id for event in replayed] == [5, 6, 7, 8, 9, 10]
    assert [event.payload["n"] for event in replayed] == [4, 5, 6, 7, 8, 9]
    assert all(event.run_id == "run_1" and event.agent_id == "orchestrator" for event in replayed)


async def test_replay_spans_several_pages(log: EventLog) -> None:
    total = REPLAY_PAGE * 2 + 7
    await asyncio.gather(*(log.append("long", "x") for _ in range(total)))
    async with aclosing(log.subscribe("long")) as stream:
        ids = [event.id async for event in stream]
    assert ids == list(range(1, total + 1))


@pytest.mark.parametrize("buffer", [4096, 16], ids=["roomy-buffer", "overflowing-buffer"])
async def test_handover_from_replay_to_live_has_no_gap_and_no_duplicate(
    db: Database, buffer: int
) -> None:
    """With a tiny buffer the follower's buffer overflows while it replays: it must replay
    again rather than lose events or be told it lagged."""
    async with EventLog(db=db, subscriber_buffer=buffer, max_batch=8) as log:
        await _check_handover(log)


async def _check_handover(log: EventLog) -> None:
    total = 1500
    started = asyncio.Event()

    async def publish() -> None:
        for n in range(total):
            await log.append("busy", "tick", {"n": n})
            if n == 600:
                started.set()
            if n % 50 == 0:
                await asyncio.sleep(0)  # let the subscriber interleave with the writer

    publisher = asyncio.create_task(publish())
    await started.wait()  # subscribe while appends are still arriving
    async with aclosing(log.subscribe("busy", after=0, follow=True)) as stream:
        received = await asyncio.wait_for(collect(stream, total), timeout=60)
    await publisher
    assert [event.id for event in received] == list(range(1, total + 1))


async def test_live_only_events_reach_followers_and_are_never_replayed(log: EventLog) -> None:
    await log.append("t1", "run-start")
    async with aclosing(log.subscribe("t1", follow=True)) as stream:
        first = await anext(stream)
        log.publish_live("t1", "text-delta", {"text": "hel"})
        durable = await log.append("t1", "text-block", {"text": "hello"})
        live, block = await collect(stream, 2)
    assert first.id == 1
    assert live.type == "text-delta" and live.id is None and not live.durable
    assert block.id == durable.id == 2
    async with aclosing(log.subscribe("t1")) as stream:
        assert [event.type async for event in stream] == ["run-start", "text-block"]


async def test_a_failing_append_leaves_no_gap_and_does_not_fail_its_batch(
    log: EventLog, db: Database
) -> None:
    """A database error after the id counter moved rolls the counter back with the insert."""
    await log.append("t1", "first")
    async with db.engine.begin() as conn:
        if db.is_sqlite:
            await conn.execute(
                text(
                    "CREATE TRIGGER poison BEFORE INSERT ON events WHEN NEW.type = 'poison' "
                    "BEGIN SELECT RAISE(ABORT, 'poisoned'); END"
                )
            )
        else:
            await conn.execute(
                text(
                    "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN "
                    "IF NEW.type = 'poison' THEN RAISE EXCEPTION 'poisoned'; END IF; "
                    "RETURN NEW; END $$ LANGUAGE plpgsql"
                )
            )
            await conn.execute(
                text(
                    "CREATE TRIGGER poison BEFORE INSERT ON events FOR EACH ROW "
                    "EXECUTE FUNCTION poison()"
                )
            )
    results = await asyncio.gather(
        log.append("t1", "ok"),
        log.append("t1", "poison"),
        log.append("t1", "ok"),
        return_exceptions=True,
    )
    assert isinstance(results[1], UnavailableError)
    assert [r.id for r in results if isinstance(r, Event)] == [2, 3]
    assert (await log.append("t1", "after")).id == 4
    assert await stored_ids(db, "t1") == [1, 2, 3, 4]


async def test_a_killed_appender_leaves_no_gap_and_no_reused_id(
    database_url: str, db: Database
) -> None:
    """SIGKILL a process in the middle of appending; the log it leaves is gapless and the
    next id is one past the last stored one."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from server.logs import configure_logging
        from server.runtime.events import EventLog
        from server.store import Database

        async def main():
            configure_logging(level="warning")
            db = await Database.open({database_url!r})
            async with EventLog(db=db) as log:
                n = 0
                while True:
                    await asyncio.gather(*(log.append("crash", "tick") for _ in range(20)))
                    n += 20
                    if n == 200:
                        print("appending", flush=True)

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout=60)
        assert line.strip() == b"appending"
        await asyncio.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    ids = await stored_ids(db, "crash")
    assert len(ids) >= 200
    assert ids == list(range(1, len(ids) + 1))
    async with db.session() as session:
        counter = (
            await session.execute(select(ThreadRow.last_event_id).where(ThreadRow.id == "crash"))
        ).scalar_one()
    assert counter == len(ids)
    async with EventLog(db=db) as log:
        assert (await log.append("crash", "after-restart")).id == len(ids) + 1


async def test_ids_continue_across_a_restart(database_url: str) -> None:
    for expected_first in (1, 6, 11):
        database = await Database.open(database_url)
        async with EventLog(db=database) as log:
            events = [await log.append("persist", "tick") for _ in range(5)]
        await database.close()
        assert [e.id for e in events] == list(range(expected_first, expected_first + 5))


async def test_a_stalled_subscriber_is_told_it_lagged_and_can_resume(db: Database) -> None:
    async with EventLog(db=db, subscriber_buffer=16, max_batch=8) as log:
        await log.append("t1", "first")
        stalled = log.subscribe("t1", follow=True)
        healthy = log.subscribe("t1", follow=True)
        assert (await anext(stalled)).id == 1
        assert (await anext(healthy)).id == 1
        # The stalled follower asks for one more event (so it is live), then never reads again.
        stalled_second = asyncio.create_task(anext(stalled))
        received: list[int] = []

        async def read_healthy() -> None:
            async for event in healthy:
                received.append(event.id or 0)
                if event.id == 501:
                    return

        reader = asyncio.create_task(read_healthy())
        # The stalled subscriber reads nothing while 500 events are appended: appends must
        # all complete (a publisher never waits for a subscriber).
        for _ in range(50):
            appended = await asyncio.wait_for(
                asyncio.gather(*(log.append("t1", "tick") for _ in range(10))), timeout=60
            )
        assert appended[-1].id == 501
        await asyncio.wait_for(reader, timeout=60)
        assert received == list(range(2, 502))

        assert (await stalled_second).id == 2
        with pytest.raises(SubscriberLaggedError) as lagged:
            await anext(stalled)
        assert lagged.value.last_event_id == 2
        assert "after=2" in str(lagged.value)
        await stalled.aclose()
        await healthy.aclose()
        async with aclosing(log.subscribe("t1", after=lagged.value.last_event_id)) as resumed:
            assert [e.id async for e in resumed] == list(range(3, 502))


async def test_subscribing_to_an_unknown_thread_or_past_the_end_fails_clearly(
    log: EventLog,
) -> None:
    with pytest.raises(NotFoundError, match="'ghost' does not exist"):
        await anext(log.subscribe("ghost"))
    await log.append("t1", "only")
    with pytest.raises(OutOfRangeError, match="after=1 or less"):
        await anext(log.subscribe("t1", after=7))
    with pytest.raises(InvalidArgumentError, match="thread id"):
        await anext(log.subscribe("bad id with spaces"))


async def test_a_payload_that_is_not_json_is_refused_before_it_is_queued(log: EventLog) -> None:
    with pytest.raises(InvalidArgumentError, match="JSON"):
        await log.append("t1", "bad", {"when": object()})
    assert (await log.append("t1", "good")).id == 1


async def test_closing_ends_followers_with_their_resume_point(db: Database) -> None:
    log = EventLog(db=db)
    log.start()
    await log.append("t1", "first")
    follower = log.subscribe("t1", follow=True)
    assert (await anext(follower)).id == 1
    await log.close()
    with pytest.raises(UnavailableError, match="after=1"):
        await anext(follower)
    with pytest.raises(UnavailableError):
        await log.append("t1", "late")


async def test_appends_are_refused_rather_than_left_waiting_if_the_writer_died(
    db: Database,
) -> None:
    log = EventLog(db=db)
    log.start()
    assert log._writer is not None
    log._writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await log._writer
    with pytest.raises(UnavailableError):
        await asyncio.wait_for(log.append("t1", "x"), timeout=5)
    await log.close()
