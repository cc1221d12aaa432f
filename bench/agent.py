"""Agent benchmark: what the loop adds to a conversation turn.

A run here is `SendMessage` → `run-finish` over gRPC for a turn with one tool call
(`update-tasks`) and a closing text: two streamed model requests, the tool, and every event
and history write. The baseline, in the same run, is the same two streamed requests made
directly with the SDK against the same local Messages API stand-in. The difference is the
loop's own cost per turn (history, state, events, validation, tool).

It also weighs the tool definitions of a thread's first model request: every tool (loading
on demand off) beside the core the orchestrator starts with (the default), in bytes and in
tokens estimated at four bytes each.

    python -m bench.agent [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import anthropic
import grpc
from anthropic.types import RawMessageStreamEvent

from bench.summary import record
from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from server.app import Application
from server.logs import configure_logging
from server.settings import load_settings
from tests.fake_model import FakeMessagesAPI, Turn, text, tool

CHECKLIST = {"tasks": [{"id": "a", "description": "Draft the workflow", "status": "in_progress"}]}


@contextlib.asynccontextmanager
async def agent_server(
    model: FakeMessagesAPI, *, deferred_tools: bool = True
) -> AsyncIterator[grpc.aio.Channel]:
    configure_logging(level="warning")
    with tempfile.TemporaryDirectory() as data_dir:
        settings = load_settings(
            port=0,
            data_dir=Path(data_dir),
            sandbox_provider="none",
            model="claude-bench",
            anthropic_api_key="sk-bench",
            anthropic_base_url=model.url,
            agent_deferred_tools=deferred_tools,
        )
        async with (
            Application(settings) as app,
            grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel,
        ):
            yield channel


def turn_script() -> list[Turn]:
    return [tool("update-tasks", CHECKLIST, say="Planning."), text("Done.")]


async def agent_run(stub: agent_pb2_grpc.AgentStub, thread: str) -> float:
    started = time.perf_counter()
    sent = await stub.SendMessage(agent_pb2.SendMessageRequest(thread_id=thread, message="go"))
    call = stub.StreamEvents(agent_pb2.StreamEventsRequest(thread_id=thread, follow=True))
    async for response in call:
        if response.event.type == "run-finish" and response.event.run_id == sent.run_id:
            call.cancel()
            break
    return (time.perf_counter() - started) * 1000


async def direct_run(client: anthropic.AsyncAnthropic, tools: list[dict[str, object]]) -> float:
    """The same two streamed requests, straight through the SDK."""
    started = time.perf_counter()
    messages: list[dict[str, object]] = [{"role": "user", "content": "go"}]
    for _ in range(2):
        params: dict[str, Any] = {
            "model": "claude-bench",
            "max_tokens": 1024,
            "system": "bench",
            "messages": messages,
            "tools": tools,
        }
        stream = cast(
            "anthropic.AsyncStream[RawMessageStreamEvent]",
            await client.messages.create(**params, stream=True),
        )
        async with stream:
            async for _event in stream:
                pass
        messages = [{"role": "user", "content": "go"}]
    return (time.perf_counter() - started) * 1000


async def first_request_tools(model: FakeMessagesAPI, *, deferred_tools: bool) -> list[Any]:
    """The tool definitions of a new thread's first model request."""
    async with agent_server(model, deferred_tools=deferred_tools) as channel:
        model.script(text("Hello."))
        seen = len(model.requests)
        await agent_run(agent_pb2_grpc.AgentStub(channel), "tools")
    tools: list[Any] = model.requests[seen]["tools"]
    return tools


def print_tool_weight(every: list[Any], core: list[Any]) -> None:
    every_bytes, core_bytes = len(json.dumps(every)), len(json.dumps(core))
    print("tool definitions in a thread's first model request:")
    print(f"  every tool  {len(every):4d} tools {every_bytes:8d} B  (~{every_bytes // 4} tokens)")
    print(f"  core only   {len(core):4d} tools {core_bytes:8d} B  (~{core_bytes // 4} tokens)")
    print(f"  core / every (ratio) {core_bytes / every_bytes:.2f}")


async def main(rounds: int) -> None:
    model = FakeMessagesAPI()
    await model.start()
    try:
        every = await first_request_tools(model, deferred_tools=False)
        core = await first_request_tools(model, deferred_tools=True)
        async with agent_server(model) as channel:
            stub = agent_pb2_grpc.AgentStub(channel)
            model.script(*turn_script())
            await agent_run(stub, "warm-up")
            tools = model.requests[0]["tools"]
            agent_ms = []
            for n in range(rounds):
                model.script(*turn_script())
                agent_ms.append(await agent_run(stub, f"bench-{n}"))
        client = anthropic.AsyncAnthropic(api_key="sk-bench", base_url=model.url, max_retries=0)
        direct_ms = []
        for _ in range(rounds):
            model.script(text("Planning."), text("Done."))
            direct_ms.append(await direct_run(client, tools))
        await client.close()
    finally:
        await model.close()
    agent_p50, direct_p50 = statistics.median(agent_ms), statistics.median(direct_ms)
    print(f"agent turn (1 tool call, 2 model requests), p50 over {rounds} runs:")
    print(f"  agent loop over gRPC  {agent_p50:8.1f} ms")
    print(f"  SDK alone (baseline)  {direct_p50:8.1f} ms")
    overhead, ratio = agent_p50 - direct_p50, agent_p50 / direct_p50
    print(f"  loop overhead         {overhead:8.1f} ms  (ratio {ratio:.1f})")
    print(f"  own cost per model request {overhead / 2:8.1f} ms")
    record(
        "agent",
        "agent turn (1 tool call, 2 model requests), p50",
        agent_p50,
        direct_p50,
        "ms",
        note="baseline: the two requests through the SDK alone",
    )
    record(
        "agent",
        "the loop's own cost per model request, p50",
        overhead / 2,
        None,
        "ms",
        note="turn minus the SDK alone, halved",
    )
    print_tool_weight(every, core)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(main(parser.parse_args().rounds))
