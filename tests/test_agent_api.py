"""The Agent service over real gRPC on a loopback port."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest
from sqlalchemy import text

from instance_ai.json_text import from_json
from instance_ai.metadata import RESUME_AFTER_KEY
from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from server.app import Application
from server.settings import Settings
from tests.conftest import serving


def ids_of(responses: list[agent_pb2.StreamEventsResponse]) -> list[int]:
    return [r.event.id for r in responses]


async def read_all(
    agent: agent_pb2_grpc.AgentStub, thread_id: str, after: str = ""
) -> list[agent_pb2.StreamEventsResponse]:
    call = agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id=thread_id, after=after))
    return [response async for response in call]


async def test_stream_replays_after_the_cursor_with_the_full_envelope(
    app: Application, agent: agent_pb2_grpc.AgentStub
) -> None:
    events = app.parts.events
    for n in range(5):
        await events.append("t1", "tool-call", {"n": n, "name": "x"}, run_id="run_a", agent_id="ag")
    responses = await read_all(agent, "t1", after="2")
    assert ids_of(responses) == [3, 4, 5]
    event = responses[0].event
    assert event.type == "tool-call"
    assert (event.thread_id, event.run_id, event.agent_id) == ("t1", "run_a", "ag")
    assert from_json(event.payload_json) == {"n": 2, "name": "x"}
    assert event.ts.seconds > 0


async def test_follow_goes_live_without_gap_or_duplicate_while_appending(
    app: Application, agent: agent_pb2_grpc.AgentStub
) -> None:
    events = app.parts.events
    total = 800
    halfway = asyncio.Event()

    async def publish() -> None:
        for n in range(total):
            await events.append("live", "tick", {"n": n})
            if n == total // 2:
                halfway.set()

    publisher = asyncio.create_task(publish())
    await halfway.wait()
    call = agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id="live", follow=True))
    received: list[int] = []
    async for response in call:
        received.append(response.event.id)
        if len(received) == total:
            break
    call.cancel()
    await publisher
    assert received == list(range(1, total + 1))


async def test_live_only_events_carry_no_id(
    app: Application, agent: agent_pb2_grpc.AgentStub
) -> None:
    events = app.parts.events
    await events.append("t1", "run-start")
    call = agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id="t1", follow=True))
    stream = aiter(call)
    assert (await anext(stream)).event.id == 1
    events.publish_live("t1", "text-delta", {"text": "hi"})
    delta = (await anext(stream)).event
    call.cancel()
    assert delta.type == "text-delta"
    assert not delta.HasField("id")


async def test_a_stalled_client_is_ended_with_aborted_and_a_resume_point(
    make_settings: Callable[..., Settings],
) -> None:
    async with Application(make_settings(subscriber_buffer=512)) as app:
        events = app.parts.events
        await events.append("t1", "first")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
            agent = agent_pb2_grpc.AgentStub(channel)
            call = agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id="t1", follow=True))
            stream = aiter(call)
            assert (await anext(stream)).event.id == 1
            # The client reads nothing more while 6,000 events of ~1 KB are appended: far
            # beyond the subscriber's buffer plus what the transport holds.
            filler = "x" * 1000
            for _ in range(60):
                await asyncio.gather(
                    *(events.append("t1", "tick", {"f": filler}) for _ in range(100))
                )
            with pytest.raises(grpc.aio.AioRpcError) as lagged:
                async for _ in stream:
                    pass
            assert lagged.value.code() is grpc.StatusCode.ABORTED
            resume = dict(lagged.value.trailing_metadata() or ())[RESUME_AFTER_KEY]
            assert f"after={resume}" in (lagged.value.details() or "")
            rest = await read_all(agent, "t1", after=resume)
            assert ids_of(rest) == list(range(int(resume) + 1, 6002))


async def test_ids_survive_a_server_restart(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    for expected in ([1, 2, 3], [4, 5, 6]):
        async with Application(settings) as app:
            for _ in range(3):
                await app.parts.events.append("t1", "tick")
            async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
                responses = await read_all(agent_pb2_grpc.AgentStub(channel), "t1")
        assert ids_of(responses)[-3:] == expected
        assert ids_of(responses) == list(range(1, expected[-1] + 1))


@pytest.mark.parametrize(
    ("request_", "code", "says"),
    [
        (agent_pb2.StreamEventsRequest(thread_id="ghost"), "NOT_FOUND", "does not exist"),
        (
            agent_pb2.StreamEventsRequest(thread_id="t1", after="abc"),
            "INVALID_ARGUMENT",
            "decimal id",
        ),
        (
            agent_pb2.StreamEventsRequest(thread_id="t1", after="-3"),
            "INVALID_ARGUMENT",
            "decimal id",
        ),
        (
            agent_pb2.StreamEventsRequest(thread_id="t1", after="99"),
            "OUT_OF_RANGE",
            "after=1 or less",
        ),
        (agent_pb2.StreamEventsRequest(thread_id="a b"), "INVALID_ARGUMENT", "A-Z a-z 0-9"),
        (agent_pb2.StreamEventsRequest(thread_id=""), "INVALID_ARGUMENT", "1-128 characters"),
    ],
)
async def test_bad_stream_requests_get_a_status_and_a_message_saying_what_to_change(
    app: Application,
    agent: agent_pb2_grpc.AgentStub,
    request_: agent_pb2.StreamEventsRequest,
    code: str,
    says: str,
) -> None:
    await app.parts.events.append("t1", "only")
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await read_all(agent, request_.thread_id, request_.after)
    assert error.value.code().name == code
    assert says in (error.value.details() or "")


async def test_thread_status_cancel_and_delete(
    app: Application, agent: agent_pb2_grpc.AgentStub
) -> None:
    threads = app.parts.threads
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await agent.GetThreadStatus(agent_pb2.GetThreadStatusRequest(thread_id="t1"))
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND

    run_id = await threads.start_run("t1")
    status = await agent.GetThreadStatus(agent_pb2.GetThreadStatusRequest(thread_id="t1"))
    assert (status.has_active_run, status.active_run_id, status.last_event_id) == (True, run_id, 1)

    cancelled = await agent.CancelRun(agent_pb2.CancelRunRequest(thread_id="t1"))
    assert (cancelled.cancelled, cancelled.run_id) == (True, run_id)
    again = await agent.CancelRun(agent_pb2.CancelRunRequest(thread_id="t1"))
    assert (again.cancelled, again.run_id) == (False, "")  # idempotent

    finish = (await read_all(agent, "t1"))[-1].event
    assert finish.type == "run-finish"
    assert from_json(finish.payload_json) == {"status": "cancelled", "reason": "user_cancelled"}

    await agent.DeleteThread(agent_pb2.DeleteThreadRequest(thread_id="t1"))
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await read_all(agent, "t1")
    assert gone.value.code() is grpc.StatusCode.NOT_FOUND
    async with app.parts.db.engine.connect() as conn:
        for table in ("threads", "runs", "events"):
            column = "id" if table == "threads" else "thread_id"
            left = await conn.execute(text(f"SELECT count(*) FROM {table} WHERE {column} = 't1'"))
            assert left.scalar_one() == 0, table
    with pytest.raises(grpc.aio.AioRpcError) as gone_again:
        await agent.DeleteThread(agent_pb2.DeleteThreadRequest(thread_id="t1"))
    assert gone_again.value.code() is grpc.StatusCode.NOT_FOUND


async def test_deleting_a_thread_ends_its_followers(
    app: Application, agent: agent_pb2_grpc.AgentStub
) -> None:
    await app.parts.events.append("t1", "first")
    call = agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id="t1", follow=True))
    stream = aiter(call)
    await anext(stream)
    await agent.DeleteThread(agent_pb2.DeleteThreadRequest(thread_id="t1"))
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await anext(stream)
    assert ended.value.code() is grpc.StatusCode.NOT_FOUND
    assert "was deleted" in (ended.value.details() or "")


async def test_one_active_run_per_thread(app: Application) -> None:
    threads = app.parts.threads
    results = await asyncio.gather(
        *(threads.start_run("t1") for _ in range(5)), return_exceptions=True
    )
    started = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(started) == 1 and len(refused) == 4
    assert all("already has an active run" in str(r) for r in refused)


async def test_an_oversize_chat_message_is_resource_exhausted(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings(max_chat_message_chars=100)) as (_app, channel):
        agent = agent_pb2_grpc.AgentStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as too_long:
            await agent.SendMessage(agent_pb2.SendMessageRequest(thread_id="t1", message="y" * 101))
        assert too_long.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "INSTANCE_AI_MAX_CHAT_MESSAGE_CHARS" in (too_long.value.details() or "")


async def test_an_oversize_request_is_resource_exhausted(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings(max_message_bytes=64 * 1024)) as (_app, channel):
        agent = agent_pb2_grpc.AgentStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as too_big:
            await agent.SendMessage(
                agent_pb2.SendMessageRequest(thread_id="t1", message="z" * 100_000)
            )
        assert too_big.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        # The connection and the server are fine afterwards.
        with pytest.raises(grpc.aio.AioRpcError) as small:
            await agent.SendMessage(agent_pb2.SendMessageRequest(thread_id="t1", message="hi"))
        # No model is configured here: the answer names the setting to set.
        assert small.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "INSTANCE_AI_MODEL" in (small.value.details() or "")
