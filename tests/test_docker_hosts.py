"""Sandboxes over two Docker engines (this host's and a second `dockerd` started by the
test): each thread's sandbox lives on the engine rendezvous hashing gives it, health shows
each engine, and when one engine stops its threads get a fresh sandbox on the other — the
first call says the workspace was lost — while the others' threads go on untouched."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import docker
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc, tools_pb2, tools_pb2_grpc
from sandbox import identity
from sandbox.docker_engine import DEFAULT_SOCKET
from sandbox.placement import rank
from sandbox.runtimes import choose_runtime
from server.api.server import ENGINE_HEALTH_PREFIX, RUNTIME_HEALTH_PREFIX
from server.settings import Settings
from tests.conftest import serving
from tests.second_engine import SecondEngine, containers_of, local_threads, second_engine
from tests.test_cli import run_cli
from tests.waiting import until

__all__ = ["second_engine"]  # fixtures, shared

ROOT = Path(__file__).resolve().parent.parent
SOURCE = (ROOT / "examples" / "order-intake.workflow.ts").read_text()
CANDIDATES = [f"spread-{n}" for n in range(64)]


def spread_threads(engines: list[str], each: int = 3) -> list[str]:
    """Threads the hash places on each engine, `each` of both: the second engine's address
    changes from run to run, so fixed names could all land on one (1 run in 32 with six)."""
    placed: dict[str, list[str]] = {engine: [] for engine in engines}
    for thread in CANDIDATES:
        placed[rank(engines, identity.sandbox_id(thread))[0]].append(thread)
    assert all(len(threads) >= each for threads in placed.values()), placed
    return [t for threads in placed.values() for t in threads[:each]]


class Client:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.tools = tools_pb2_grpc.ToolsStub(channel)
        self.pipeline = pipeline_pb2_grpc.PipelineStub(channel)
        self.health = health_pb2_grpc.HealthStub(channel)

    async def write(self, thread: str) -> None:
        await self.tools.CallTool(
            tools_pb2.CallToolRequest(
                thread_id=thread,
                tool_name="workspace_write_file",
                arguments_json=to_json({"path": "src/intake.ts", "content": SOURCE}),
            )
        )

    async def build_and_verify(self, thread: str) -> bool:
        built = await self.pipeline.BuildWorkflow(
            pipeline_pb2.BuildWorkflowRequest(thread_id=thread, file_path="src/intake.ts")
        )
        assert built.success, built
        verified = await self.pipeline.VerifyWorkflow(
            pipeline_pb2.VerifyWorkflowRequest(thread_id=thread, workflow_id=built.workflow_id)
        )
        return bool(from_json(verified.result_json)["success"])

    async def engines(self) -> dict[str, str]:
        listed = await self.health.List(health_pb2.HealthListRequest())
        return {
            name.removeprefix(
                ENGINE_HEALTH_PREFIX
            ): health_pb2.HealthCheckResponse.ServingStatus.Name(status.status)
            for name, status in listed.statuses.items()
            if name.startswith(ENGINE_HEALTH_PREFIX)
        }


# Fifteen builds and verifications, six of them on cold runc sandboxes of an engine started for
# the test: ~50 s on a quiet machine, past the suite's 120 s when other work shares the cores.
@pytest.mark.timeout(480)
async def test_threads_spread_over_two_engines_and_move_off_one_that_stops(
    make_docker_settings: Callable[..., Settings],
    second_engine: SecondEngine,
    docker_client: docker.DockerClient,
    owner: str,
) -> None:
    engines = [DEFAULT_SOCKET, second_engine.url]
    settings = make_docker_settings(
        docker_hosts=engines,
        sandbox_engine_probe_seconds=0.3,
        # A first build starts the sandbox's worker: on two busy cores that can take seconds.
        build_compile_timeout_seconds=60,
    )
    threads = spread_threads(engines)
    expected = {t: rank(engines, identity.sandbox_id(t))[0] for t in threads}
    on_second = [t for t in threads if expected[t] == second_engine.url]
    on_first = [t for t in threads if expected[t] == DEFAULT_SOCKET]
    async with serving(settings) as (app, channel):
        client = Client(channel)
        assert await client.engines() == dict.fromkeys(engines, "SERVING")
        shown = await asyncio.to_thread(run_cli, "health", "--server", app.address, "--json")
        listed = json.loads(shown.stdout)["services"]
        assert {name: listed[ENGINE_HEALTH_PREFIX + name] for name in engines} == dict.fromkeys(
            engines, "SERVING"
        )
        # Each engine's runtime: gVisor where it is registered (this host's, by `make
        # setup`); runc on the second, which has none: NOT_SERVING, the warning, under auto.
        with second_engine.client() as second:
            registered = [docker_client.info()["Runtimes"], second.info()["Runtimes"]]
        for engine, runtimes in zip(engines, registered, strict=True):
            choice = choose_runtime(settings.sandbox_runtime, runtimes)
            entry = f"{RUNTIME_HEALTH_PREFIX}{engine}/{choice.name}"
            assert listed[entry] == ("NOT_SERVING" if choice.warning else "SERVING"), listed
        if settings.sandbox_runtime == "auto":
            assert listed[f"{RUNTIME_HEALTH_PREFIX}{DEFAULT_SOCKET}/runsc"] == "SERVING"
            assert listed[f"{RUNTIME_HEALTH_PREFIX}{second_engine.url}/runc"] == "NOT_SERVING"
            told = await asyncio.to_thread(run_cli, "health", "--server", app.address)
            assert "no gVisor there" in told.stdout  # what a person reads
        for thread in threads:
            await client.write(thread)
        gate = asyncio.Semaphore(2)  # two cores

        async def build_and_verify(thread: str) -> bool:
            async with gate:
                return await client.build_and_verify(thread)

        assert all(await asyncio.gather(*(build_and_verify(t) for t in threads)))
        with second_engine.client() as second:
            assert containers_of(second, owner) == set(on_second)
        assert local_threads(owner) == set(on_first)

        await asyncio.to_thread(second_engine.stop)

        async def second_down() -> bool:
            return (await client.engines())[second_engine.url] == "NOT_SERVING"

        await until(second_down, "the stopped engine reported NOT_SERVING")
        assert await client.engines() == {
            DEFAULT_SOCKET: "SERVING",
            second_engine.url: "NOT_SERVING",
        }
        overall = await client.health.Check(
            health_pb2.HealthCheckRequest(service="instance_ai.v1.Workspace")
        )
        assert overall.status == health_pb2.HealthCheckResponse.SERVING
        # The threads of the stopped engine: told once that their files are gone, then a
        # fresh sandbox on the other engine builds and verifies.
        for thread in on_second:
            with pytest.raises(grpc.aio.AioRpcError) as lost:
                await client.build_and_verify(thread)
            assert lost.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "workspace was on the container engine" in str(lost.value.details())
            await client.write(thread)
            assert await client.build_and_verify(thread)
        for thread in on_first:  # untouched
            assert await client.build_and_verify(thread)
        assert local_threads(owner) == set(threads)

        await asyncio.to_thread(second_engine.start)
        for _ in range(100):
            if (await client.engines())[second_engine.url] == "SERVING":
                break
            await asyncio.sleep(0.1)
        assert (await client.engines())[second_engine.url] == "SERVING"
        # A thread stays where it was placed while that engine answers.
        for thread in on_second:
            assert await client.build_and_verify(thread)
