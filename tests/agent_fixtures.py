"""Shared pieces of the agent tests: the Messages API stand-in, settings pointing at it, and a
small client that sends messages, follows a thread's events and answers cards over gRPC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import agent_pb2, agent_pb2_grpc, events_pb2, tools_pb2_grpc
from server.settings import Settings
from tests.fake_model import FakeMessagesAPI

Event = dict[str, Any]


@pytest.fixture
async def model() -> AsyncIterator[FakeMessagesAPI]:
    fake = FakeMessagesAPI()
    await fake.start()
    yield fake
    await fake.close()


def with_model(fake: FakeMessagesAPI, **overrides: Any) -> dict[str, Any]:
    """Settings values that point the service at the stand-in model."""
    return {
        "model": "claude-test",
        "anthropic_api_key": "sk-test-key",
        "anthropic_base_url": fake.url,
        "model_max_retries": 1,
        # Scripts call the tool under test straight away; loading tools on demand (the
        # default) has tests of its own (tests/test_tool_loading.py).
        "agent_deferred_tools": False,
        # Nor does the build ask the model about its simulation plan (an extra request the
        # scripts would have to answer): tests/test_simulation_model.py covers it.
        "simulation_model_pass": False,
        # Nor the person before a new workflow is created (a card the scripts would have to
        # answer): tests/test_approval_cards.py and tests/test_permissions.py cover it, with
        # the defaults (`permissions={}`).
        "permissions": {"createWorkflow": "always_allow"},
    } | overrides


def model_env(fake: FakeMessagesAPI) -> dict[str, str]:
    """The same, as the environment of a server started as a process."""
    return {
        "INSTANCE_AI_MODEL": "claude-test",
        "INSTANCE_AI_ANTHROPIC_API_KEY": "sk-test-key",
        "INSTANCE_AI_ANTHROPIC_BASE_URL": fake.url,
        "INSTANCE_AI_AGENT_DEFERRED_TOOLS": "false",
    }


@pytest.fixture
def model_settings(
    make_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return make_settings(**with_model(model, **overrides))

    return make


# Every event a Chat received during the current test, live and durable, for the check
# against n8n's event contract (tests/event_contract.py, autouse in conftest.py).
STREAMED: list[events_pb2.Event] = []


class Chat:
    """The Agent service as one user (`metadata`: the caller's; none: the local user)."""

    def __init__(
        self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.agent = agent_pb2_grpc.AgentStub(channel)
        self.tools = tools_pb2_grpc.ToolsStub(channel)
        self.metadata = metadata

    async def send(self, thread: str, text: str) -> str:
        response = await self.agent.SendMessage(
            agent_pb2.SendMessageRequest(thread_id=thread, message=text), metadata=self.metadata
        )
        return str(response.run_id)

    async def confirm(self, thread: str, request_id: str, **resume: Any) -> str:
        response = await self.agent.Confirm(
            agent_pb2.ConfirmRequest(
                thread_id=thread, request_id=request_id, resume_json=to_json(resume)
            ),
            metadata=self.metadata,
        )
        return str(response.run_id)

    async def events(self, thread: str) -> list[Event]:
        call = self.agent.StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id=thread), metadata=self.metadata
        )
        return [_event(r.event) async for r in call]

    async def until(
        self, thread: str, predicate: Callable[[Event], bool], *, within: float = 60
    ) -> list[Event]:
        """The thread's durable events up to and including the first that matches."""
        seen: list[Event] = []

        async def follow() -> list[Event]:
            call = self.agent.StreamEvents(
                agent_pb2.StreamEventsRequest(thread_id=thread, follow=True),
                metadata=self.metadata,
            )
            async for response in call:
                event = _event(response.event)
                if event["id"] is None:
                    continue
                seen.append(event)
                if predicate(event):
                    call.cancel()
                    return seen
            raise AssertionError("the stream ended first")

        try:
            return await asyncio.wait_for(follow(), within)
        except TimeoutError:
            raise AssertionError(
                f"no matching event in {within}s; saw {[e['type'] for e in seen]}"
            ) from None

    async def finished(self, thread: str, run_id: str, *, within: float = 60) -> list[Event]:
        return await self.until(
            thread, lambda e: e["type"] == "run-finish" and e["run_id"] == run_id, within=within
        )

    async def card(self, thread: str, *, within: float = 60) -> Event:
        events = await self.until(
            thread, lambda e: e["type"] == "confirmation-request", within=within
        )
        return dict(events[-1]["payload"])

    async def status(self, thread: str) -> agent_pb2.GetThreadStatusResponse:
        request = agent_pb2.GetThreadStatusRequest(thread_id=thread)
        status: agent_pb2.GetThreadStatusResponse = await self.agent.GetThreadStatus(
            request, metadata=self.metadata
        )
        return status


def _event(event: events_pb2.Event) -> Event:
    STREAMED.append(event)
    return {
        "id": event.id if event.HasField("id") else None,
        "type": event.type,
        "run_id": event.run_id,
        "agent_id": event.agent_id,
        "payload": from_json(event.payload_json),
    }


def of_type(events: list[Event], kind: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in events if e["type"] == kind]


def last_tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of a request's last message."""
    content = request["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def tool_result(fake: FakeMessagesAPI, call_id: str) -> dict[str, Any]:
    """The tool_result block the model was sent for `call_id`."""
    for request in fake.requests:
        for message in request["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_result" and block["tool_use_id"] == call_id:
                    return dict(block)
    raise AssertionError(f"no tool_result for {call_id}")


async def nth_card(chat: Chat, thread: str, n: int) -> dict[str, Any]:
    """The thread's n-th confirmation request (1-based), once it is published."""
    count = 0

    def nth(event: Event) -> bool:
        nonlocal count
        count += event["type"] == "confirmation-request"
        return bool(count == n)

    events = await chat.until(thread, nth)
    return dict(events[-1]["payload"])
