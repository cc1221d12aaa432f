"""Threads as a user's own: opened, listed, renamed and read back over real gRPC; another
user's thread refused on every call; the conversation's history as a person reads it."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from server.settings import Settings
from tests.agent_fixtures import Chat, model, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text

__all__ = ["model"]

ANA = (("x-instance-ai-user", "ana"), ("x-instance-ai-project", "p-ana"))
BEN = (("x-instance-ai-user", "ben"), ("x-instance-ai-project", "p-ben"))


async def test_a_thread_is_opened_listed_renamed_and_private(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings()) as (_app, channel):
        agent = agent_pb2_grpc.AgentStub(channel)
        opened = await agent.CreateThread(
            agent_pb2.CreateThreadRequest(
                thread_id="t-ana-1", metadata_json=to_json({"source": "assistant_page"})
            ),
            metadata=ANA,
        )
        assert opened.created is True
        thread = opened.thread
        assert (thread.thread_id, thread.owner, thread.project_id) == ("t-ana-1", "ana", "p-ana")
        assert from_json(thread.metadata_json) == {"source": "assistant_page"}
        again = await agent.CreateThread(
            agent_pb2.CreateThreadRequest(thread_id="t-ana-1", metadata_json=to_json({"x": 1})),
            metadata=ANA,
        )
        assert again.created is False
        assert from_json(again.thread.metadata_json) == {"source": "assistant_page"}
        picked = await agent.CreateThread(agent_pb2.CreateThreadRequest(), metadata=ANA)
        assert picked.created and picked.thread.thread_id

        renamed = await agent.UpdateThread(
            agent_pb2.UpdateThreadRequest(
                thread_id="t-ana-1", title=" Orders ", metadata_json=to_json({"pinned": True})
            ),
            metadata=ANA,
        )
        assert renamed.thread.title == "Orders"
        assert from_json(renamed.thread.metadata_json) == {
            "source": "assistant_page",
            "pinned": True,
            "titleRefined": True,
        }

        # Another user: refused on every call, and lists nothing of ana's.
        for call, request in (
            (agent.GetThread, agent_pb2.GetThreadRequest(thread_id="t-ana-1")),
            (agent.CreateThread, agent_pb2.CreateThreadRequest(thread_id="t-ana-1")),
            (agent.UpdateThread, agent_pb2.UpdateThreadRequest(thread_id="t-ana-1", title="x")),
            (agent.ListMessages, agent_pb2.ListMessagesRequest(thread_id="t-ana-1")),
            (agent.GetThreadStatus, agent_pb2.GetThreadStatusRequest(thread_id="t-ana-1")),
            (agent.CancelRun, agent_pb2.CancelRunRequest(thread_id="t-ana-1")),
            (agent.DeleteThread, agent_pb2.DeleteThreadRequest(thread_id="t-ana-1")),
            (agent.SendMessage, agent_pb2.SendMessageRequest(thread_id="t-ana-1", message="hi")),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(request, metadata=BEN)
            assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED, call
            assert "another user" in (refused.value.details() or "")
        stream = agent.StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id="t-ana-1"), metadata=BEN
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            [r async for r in stream]
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        listed = await agent.ListThreads(agent_pb2.ListThreadsRequest(), metadata=BEN)
        assert list(listed.threads) == []
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await agent.GetThread(agent_pb2.GetThreadRequest(thread_id="nope"), metadata=ANA)
        assert unknown.value.code() is grpc.StatusCode.NOT_FOUND

        # Paging (newest change first) and search by title; ana's thread is unchanged.
        for n in range(4):
            await agent.CreateThread(
                agent_pb2.CreateThreadRequest(thread_id=f"t-ana-page-{n}"), metadata=ANA
            )
        seen: list[str] = []
        token = ""
        while True:
            page = await agent.ListThreads(
                agent_pb2.ListThreadsRequest(page_size=2, page_token=token), metadata=ANA
            )
            seen += [t.thread_id for t in page.threads]
            token = page.next_page_token
            if not token:
                break
        assert len(seen) == len(set(seen)) == 6
        assert seen[:4] == [f"t-ana-page-{n}" for n in (3, 2, 1, 0)]
        found = await agent.ListThreads(agent_pb2.ListThreadsRequest(search="ord"), metadata=ANA)
        assert [t.thread_id for t in found.threads] == ["t-ana-1"]
        with pytest.raises(grpc.aio.AioRpcError) as bad_token:
            await agent.ListThreads(
                agent_pb2.ListThreadsRequest(page_token="not-a-token"), metadata=ANA
            )
        assert bad_token.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as bad_title:
            await agent.UpdateThread(
                agent_pb2.UpdateThreadRequest(thread_id="t-ana-1", title="  "), metadata=ANA
            )
        assert bad_title.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        kept = await agent.GetThread(agent_pb2.GetThreadRequest(thread_id="t-ana-1"), metadata=ANA)
        assert kept.thread.title == "Orders"


async def test_the_history_holds_what_was_said_and_the_first_message_names_the_thread(
    make_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(text("Hello Ana."), text("Second answer."))
    async with serving(make_settings(**with_model(model))) as (_app, channel):
        chat = Chat(channel, ANA)
        agent = chat.agent
        first = await agent.SendMessage(
            agent_pb2.SendMessageRequest(thread_id="talk", message="Hi there", message_id="m-1"),
            metadata=ANA,
        )
        await chat.finished("talk", first.run_id)
        second = await chat.send("talk", "And again")
        await chat.finished("talk", second)

        thread = (
            await agent.GetThread(agent_pb2.GetThreadRequest(thread_id="talk"), metadata=ANA)
        ).thread
        assert thread.owner == "ana" and thread.title == "Hi there"
        history = await agent.ListMessages(
            agent_pb2.ListMessagesRequest(thread_id="talk"), metadata=ANA
        )
        said = [(m.role, m.text) for m in history.messages]
        assert said == [
            ("user", "Hi there"),
            ("assistant", "Hello Ana."),
            ("user", "And again"),
            ("assistant", "Second answer."),
        ]
        assert history.messages[0].id == "m-1"
        assert history.messages[1].run_id == first.run_id
        assert history.last_event_id == thread.last_event_id > 0
        newest = await agent.ListMessages(
            agent_pb2.ListMessagesRequest(thread_id="talk", page_size=3), metadata=ANA
        )
        assert [m.text for m in newest.messages] == ["Hello Ana.", "And again", "Second answer."]
        oldest = await agent.ListMessages(
            agent_pb2.ListMessagesRequest(thread_id="talk", page_size=3, page=1), metadata=ANA
        )
        assert [m.text for m in oldest.messages] == ["Hi there"]


async def test_a_thread_made_outside_a_conversation_is_claimed_by_its_first_person(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings()) as (app, channel):
        await app.parts.events.append("loose", "tick", {})  # e.g. a direct tool call's events
        agent = agent_pb2_grpc.AgentStub(channel)
        seen = await agent.GetThread(agent_pb2.GetThreadRequest(thread_id="loose"), metadata=BEN)
        assert seen.thread.owner == ""
        opened = await agent.CreateThread(
            agent_pb2.CreateThreadRequest(thread_id="loose"), metadata=ANA
        )
        assert (opened.created, opened.thread.owner) == (False, "ana")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await agent.GetThread(agent_pb2.GetThreadRequest(thread_id="loose"), metadata=BEN)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
