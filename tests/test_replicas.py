"""Replicas sharing one PostgreSQL database: events fan out through the database's
notifications (in order, no gap and no duplicate at the replay → live hand-over), the others
are asked and answer, one replica leads, and a lost link ends followers with where to resume."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import grpc
import pytest
from sqlalchemy.engine import make_url

from instance_ai.json_text import from_json
from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from server.errors import SubscriberLaggedError, UnavailableError
from server.runtime.events import NOTIFY_MAX, Event, EventLog
from server.runtime.replicas import Replicas, open_replica
from server.settings import Settings
from server.store import Database
from tests.conftest import serving
from tests.postgres import new_postgres_database, running_cluster

Replica = tuple[Replicas, EventLog]


@pytest.fixture
async def shared_url(postgres_url: str) -> str:
    return await new_postgres_database(postgres_url)


@contextlib.asynccontextmanager
async def replica(url: str, *, lease_s: float = 1.0, **log: Any) -> AsyncIterator[Replica]:
    db = await Database.open(url)
    replicas, events = await open_replica(db, url=url, lease_s=lease_s, **log)
    try:
        yield replicas, events
    finally:
        await replicas.close()
        await events.close()
        await db.close()


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        assert loop.time() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.05)


async def follow(events: EventLog, thread: str, until_id: int, seen: list[Event]) -> None:
    """Follow `thread` until the event `until_id` arrives."""
    async with contextlib.aclosing(events.subscribe(thread, follow=True)) as stream:
        async for event in stream:
            seen.append(event)
            if event.id == until_id:
                return


@pytest.mark.parametrize("batch", [512, 16])
async def test_a_follower_on_one_replica_gets_every_event_of_another_in_order(
    shared_url: str, batch: int
) -> None:
    total = 1_500
    async with (
        replica(shared_url, max_batch=batch, subscriber_buffer=batch) as (_a, writer),
        replica(shared_url, max_batch=batch, subscriber_buffer=batch) as (_b, reader),
    ):
        for n in range(10):  # some history to replay
            await writer.append("t1", "text-block", {"n": n})
        seen: list[Event] = []
        published: list[int] = []

        async def follow_to_the_end() -> None:
            cursor = 0
            while True:  # as a client does: a lagging follower resumes from its cursor
                subscription = reader.subscribe("t1", after=cursor, follow=True)
                try:
                    async with contextlib.aclosing(subscription) as stream:
                        async for event in stream:
                            seen.append(event)
                            cursor = event.id or cursor
                            if event.payload.get("end"):
                                return
                except SubscriberLaggedError as lagged:
                    assert lagged.last_event_id == cursor

        follower = asyncio.create_task(follow_to_the_end())

        async def burst(first: int) -> None:
            for n in range(first, first + 50):
                writer.publish_live("t1", "text-delta", {"n": n})
                published.append(n)
                await writer.append("t1", "text-block", {"n": n})

        await asyncio.gather(*(burst(first) for first in range(10, total + 10, 50)))
        big = "x" * (NOTIFY_MAX + 100)  # travels as a reference, read from the store
        last = await writer.append("t1", "text-block", {"n": total + 10, "big": big})

        async def caught_up() -> bool:
            return bool(seen) and seen[-1].id == last.id

        await eventually(caught_up, within=60)
        writer.publish_live("t1", "status", {"end": True})  # live: reaches a live follower
        await asyncio.wait_for(follower, 20)
    durable = [e.id for e in seen if e.durable]
    assert durable == list(range(1, total + 12))
    assert seen[-2].payload["big"] == big and seen[-1].type == "status"
    # Live events published before the follower was live may be missed; the rest arrive in
    # the order they were published, none twice.
    order = {n: i for i, n in enumerate(published)}
    live = [order[e.payload["n"]] for e in seen if e.type == "text-delta"]
    assert live and live == sorted(set(live))


async def test_the_others_are_asked_and_one_replica_leads(shared_url: str) -> None:
    async with replica(shared_url) as (a, _), replica(shared_url) as (b, _):
        for member in (a, b):
            member.handle("who", functools.partial(_answer, member.id))
        answers = await a.ask("who", {"x": 1})
        assert answers[0] == f"{a.id}:1" and sorted(answers) == sorted([f"{a.id}:1", f"{b.id}:1"])
        assert await a.alive() == {a.id, b.id}

        async def one_leads() -> bool:
            return a.is_leader != b.is_leader

        await eventually(one_leads)
        leader, other = (a, b) if a.is_leader else (b, a)
    async with replica(shared_url) as (c, _):
        # A leader that leaves frees the lock for the next one.
        async def c_leads() -> bool:
            return c.is_leader

        await eventually(c_leads)
    assert leader.id != other.id


async def _answer(replica_id: str, args: dict[str, Any]) -> str:
    return f"{replica_id}:{args['x']}"


async def test_a_lost_link_ends_followers_with_where_to_resume_then_recovers(
    shared_url: str,
) -> None:
    async with replica(shared_url) as (_a, writer), replica(shared_url) as (b, reader):
        first = await writer.append("t2", "text-block", {"n": 1})
        seen: list[Event] = []
        with pytest.raises(UnavailableError, match=r"after=1\b"):
            async with contextlib.aclosing(reader.subscribe("t2", follow=True)) as stream:
                async for event in stream:
                    seen.append(event)
                    assert b._link is not None
                    await _terminate(shared_url, b._link.get_server_pid())
        assert [e.id for e in seen] == [first.id]

        async def relinked() -> bool:
            return b.link_up

        await eventually(relinked)
        await writer.append("t2", "text-block", {"n": 2})
        resumed: list[Event] = []
        await asyncio.wait_for(follow(reader, "t2", 2, resumed), 20)
        assert [e.id for e in resumed] == [1, 2]


async def _terminate(url: str, pid: int) -> None:
    parsed = make_url(url)
    conn = await asyncpg.connect(
        host=parsed.host, port=parsed.port, user=parsed.username, database=parsed.database
    )
    try:
        await conn.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()


async def test_the_database_going_away_is_unavailable_and_recovers_without_a_restart(
    make_settings: Callable[..., Settings],
) -> None:
    with running_cluster() as cluster:
        settings = make_settings(database_url=cluster.url, replica_lease_seconds=1)
        async with serving(settings) as (app, channel):
            agent = agent_pb2_grpc.AgentStub(channel)
            await app.parts.events.append("away", "text-block", {"n": 1})
            call = agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id="away", follow=True))
            stream = aiter(call)
            assert (await anext(stream)).event.id == 1
            await asyncio.to_thread(cluster.stop)
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await anext(stream)
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "after=1" in str(ended.value.details())
            status = agent_pb2.GetThreadStatusRequest(thread_id="away")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await agent.GetThreadStatus(status)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "database" in str(refused.value.details())

            await asyncio.to_thread(cluster.start)

            async def answers() -> bool:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await agent.GetThreadStatus(status)
                    return app.parts.replicas.link_up
                return False

            await eventually(answers, within=60)
            await app.parts.events.append("away", "text-block", {"n": 2})
            resumed = agent.StreamEvents(
                agent_pb2.StreamEventsRequest(thread_id="away", after="1", follow=True)
            )
            event = (await anext(aiter(resumed))).event
            resumed.cancel()
            assert event.id == 2 and from_json(event.payload_json) == {"n": 2}
