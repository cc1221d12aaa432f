"""Three `instance-ai serve` processes on one PostgreSQL database and one Docker engine act as
one service: a run executing on one replica streams live to a client of another and its card
is answered on a third; a cancel on one stops the run another drives; a replica killed with
SIGKILL has its run ended as interrupted by the others within the lease; twenty threads spread
over the replicas all build and verify in shared sandboxes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import grpc
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import agent_pb2, pipeline_pb2, pipeline_pb2_grpc, tools_pb2, tools_pb2_grpc
from sandbox.docker_engine import DEFAULT_SOCKET
from sandbox.identity import sandbox_id
from sandbox.image.build import BuiltImage
from sandbox.placement import rank
from tests.agent_fixtures import Chat, Event, model, model_env, of_type
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.postgres import new_postgres_database
from tests.sandbox_fixtures import docker_env
from tests.second_engine import SecondEngine, containers_of, local_threads, second_engine
from tests.test_cli import ServerProcess, start_server, stop_server
from tests.waiting import until

__all__ = ["model", "second_engine"]  # fixtures, shared

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "order-intake.workflow.ts"
# Short, so a dead replica is noticed quickly (the heartbeat is a fifth of it), and long
# enough that a live replica's heartbeat is not late on a machine busy with the whole suite
# (at 3 s, runs were taken from live replicas there).
LEASE_S = 10.0


class Trio:
    """Three replicas and a channel to each."""

    def __init__(self, servers: list[ServerProcess], channels: list[grpc.aio.Channel]) -> None:
        self.servers = servers
        self.channels = channels
        self.chats = [Chat(channel) for channel in channels]


@pytest.fixture
def shared_env(
    postgres_url: str, tmp_path: Path, owner: str, sandbox_image: BuiltImage
) -> Iterator[dict[str, str]]:
    url = asyncio.run(new_postgres_database(postgres_url))
    yield docker_env(owner) | {
        "INSTANCE_AI_DATABASE_URL": url,
        "INSTANCE_AI_REPLICA_LEASE_SECONDS": str(LEASE_S),
    }


@contextlib.asynccontextmanager
async def replicas(data_dir: Path, env: dict[str, str]) -> AsyncIterator[Trio]:
    # Started together: they migrate the fresh database once, under its lock.
    servers = list(
        await asyncio.gather(
            *(asyncio.to_thread(start_server, data_dir, env=env) for _ in range(3))
        )
    )
    channels = [grpc.aio.insecure_channel(s.address) for s in servers]
    try:
        yield Trio(servers, channels)
    finally:
        for channel in channels:
            await channel.close()
        for server in servers:
            stop_server(server)


def contiguous(events: list[Event]) -> bool:
    return [e["id"] for e in events] == list(range(1, len(events) + 1))


async def test_a_run_streams_to_another_replica_and_its_card_is_answered_on_a_third(
    tmp_path: Path, shared_env: dict[str, str], model: FakeMessagesAPI
) -> None:
    question = {"id": "to", "question": "Where to?", "type": "single", "options": ["A", "B"]}
    model.script(tool("ask-user", {"questions": [question]}), text("B it is."))
    async with replicas(tmp_path / "data", shared_env | model_env(model)) as trio:
        first, second, third = trio.chats
        run_id = await first.send("shared", "ask me where")
        card = await second.card("shared")  # streamed from the second replica
        answers = [{"questionId": "to", "selectedOptions": ["B"]}]
        assert await third.confirm("shared", card["requestId"], kind="questions", answers=answers)
        events = await second.finished("shared", run_id)
        status = await first.status("shared")
    assert contiguous(events)
    assert of_type(events, "run-finish") == [{"status": "completed"}]
    assert of_type(events, "text-block")[-1]["text"] == "B it is."
    assert not status.has_active_run
    assert model.rejected == []


async def test_a_cancel_on_one_replica_stops_the_run_another_drives(
    tmp_path: Path, shared_env: dict[str, str], model: FakeMessagesAPI
) -> None:
    never = asyncio.Event()
    model.script(Turn(blocks=[{"type": "text", "text": "thinking"}], hold=never))
    async with replicas(tmp_path / "data", shared_env | model_env(model)) as trio:
        first, second, third = trio.chats
        run_id = await first.send("cancelled", "think hard")
        live = await live_delta(second, "cancelled")
        cancelled = await third.agent.CancelRun(agent_pb2.CancelRunRequest(thread_id="cancelled"))
        events = await second.finished("cancelled", run_id)
        # The replica driving it closed its model stream: the stand-in saw the client leave.
        await until(lambda: model.aborted, "the model's stream closed", every_s=0.1)
    assert live == "thinking"
    assert cancelled.cancelled and cancelled.run_id == run_id
    assert of_type(events, "run-finish") == [{"status": "cancelled", "reason": "user_cancelled"}]
    assert model.aborted == 1


async def live_delta(chat: Chat, thread: str, *, within: float = 60) -> str:
    """The first live text delta the replica behind `chat` streams for `thread`."""

    async def first() -> str:
        call = chat.agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id=thread, follow=True))
        async for response in call:
            if response.event.type == "text-delta":
                call.cancel()
                return str(from_json(response.event.payload_json)["text"])
        raise AssertionError("the stream ended first")

    return await asyncio.wait_for(first(), within)


async def test_a_replica_killed_mid_run_has_its_run_ended_by_the_others(
    tmp_path: Path, shared_env: dict[str, str], model: FakeMessagesAPI
) -> None:
    model.script(tool("workspace_execute_command", {"command": "sleep 120"}))
    async with replicas(tmp_path / "data", shared_env | model_env(model)) as trio:
        first, second, third = trio.chats
        run_id = await first.send("killed", "run a long command")
        events = await second.until("killed", lambda e: e["type"] == "tool-call", within=120)
        call_id = of_type(events, "tool-call")[-1]["toolCallId"]
        killed_at = time.monotonic()
        stop_server(trio.servers[0])  # SIGKILL: the replica cannot say anything
        events = await second.finished("killed", run_id, within=10 * LEASE_S + 30)
        takeover = time.monotonic() - killed_at
        print(f"run ended {takeover:.1f} s after its replica was killed (lease {LEASE_S} s)")
        model.script(text("It was interrupted."))
        again = await third.send("killed", "what happened?")  # the thread is free again
        after = await third.finished("killed", again)
    assert of_type(events, "tool-interrupted") == [
        {"toolCallId": call_id, "error": "the server stopped during this call"}
    ]
    assert of_type(events, "run-finish")[-1] == {
        "status": "interrupted",
        "reason": "crash_interrupted",
    }
    assert contiguous(after) and of_type(after, "run-finish")[-1] == {"status": "completed"}
    # The history stayed valid for the model: the cut-off call has an error result.
    assert model.rejected == []


async def test_twenty_threads_spread_over_the_replicas_and_engines_build_and_verify(
    tmp_path: Path,
    shared_env: dict[str, str],
    second_engine: SecondEngine,
    docker_client: docker.DockerClient,
    owner: str,
) -> None:
    source = await asyncio.to_thread(EXAMPLE.read_text)
    engines = [DEFAULT_SOCKET, second_engine.url]
    env = shared_env | {
        "INSTANCE_AI_DOCKER_HOSTS": json.dumps(engines),
        # A first build starts the sandbox's worker: on two busy cores that can take seconds.
        "INSTANCE_AI_BUILD_COMPILE_TIMEOUT_SECONDS": "60",
    }
    async with replicas(tmp_path / "data", env) as trio:
        tools = [tools_pb2_grpc.ToolsStub(c) for c in trio.channels]
        pipelines = [pipeline_pb2_grpc.PipelineStub(c) for c in trio.channels]
        gate = asyncio.Semaphore(4)  # two cores: more at once only queues

        async def case(n: int) -> tuple[bool, str]:
            thread = f"case-{n}"
            async with gate:
                # Written through one replica, built and verified through the next.
                await tools[n % 3].CallTool(
                    tools_pb2.CallToolRequest(
                        thread_id=thread,
                        tool_name="workspace_write_file",
                        arguments_json=to_json({"path": "src/intake.ts", "content": source}),
                    )
                )
                builder = pipelines[(n + 1) % 3]
                built = await builder.BuildWorkflow(
                    pipeline_pb2.BuildWorkflowRequest(thread_id=thread, file_path="src/intake.ts")
                )
                assert built.success, built
                verified = await builder.VerifyWorkflow(
                    pipeline_pb2.VerifyWorkflowRequest(
                        thread_id=thread, workflow_id=built.workflow_id
                    )
                )
            result = from_json(verified.result_json)
            return bool(result["success"]), built.workflow_id

        outcomes = await asyncio.gather(*(case(n) for n in range(20)))
    assert all(ok for ok, _ in outcomes), outcomes
    assert len({workflow for _, workflow in outcomes}) == 20
    # Each thread's one sandbox is on the engine rendezvous hashing gives it.
    placed = {f"case-{n}": rank(engines, sandbox_id(f"case-{n}"))[0] for n in range(20)}
    with second_engine.client() as second:
        on_second = containers_of(second, owner)
    assert local_threads(owner) == {t for t, e in placed.items() if e != engines[1]}
    assert on_second == {t for t, e in placed.items() if e == engines[1]} and on_second
