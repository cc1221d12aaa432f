"""Fault injection with real parts: the engine going away and coming back (through a cuttable
path to the real engine, see engine_proxy.py), containers stopped or removed from outside.
After each fault: a clear status while it lasts, nothing lost, the thread usable after.

The engine going away is the Docker engine's fault (runsc has no daemon: each call is a
process of its own), so those tests drive Docker; the faults of sandboxes themselves run under
both engines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from instance_ai.json_text import from_json
from instance_ai.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    pipeline_pb2,
    pipeline_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from sandbox.engine import ContainerInfo
from sandbox.image.build import BuiltImage
from sandbox.manager import SandboxManager
from server.settings import Settings
from tests.agent_fixtures import Chat, model, model_env, of_type, with_model
from tests.conftest import serving
from tests.engine_proxy import EngineProxy, engine_proxy
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.sandbox_fixtures import docker_env, exec_in, owned_containers, stop_from_outside
from tests.test_cli import start_server, stop_server
from tests.tool_client import ToolClient
from tests.waiting import until

pytestmark = pytest.mark.fault

WORKSPACE = "instance_ai.v1.Workspace"
__all__ = ["model"]  # fixtures, shared


@pytest.fixture
def proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineProxy]:
    with engine_proxy(tmp_path) as running:
        monkeypatch.setenv("DOCKER_HOST", running.docker_host)
        yield running


# runsc drives gVisor's sandboxes alone: the suite's pass under runc has Docker's.
ENGINES = (
    ["docker"] if os.environ.get("INSTANCE_AI_SANDBOX_RUNTIME") == "runc" else ["docker", "runsc"]
)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """The engine that drives the sandboxes of a test of sandbox faults."""
    return str(request.param)


async def health_of(channel: grpc.aio.Channel, service: str) -> int:
    response = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service)
    )
    return int(response.status)


async def wait_for_health(channel: grpc.aio.Channel, service: str, status: int) -> None:
    deadline = time.monotonic() + 20
    while await health_of(channel, service) != status:
        assert time.monotonic() < deadline, f"{service} never became {status}"
        await asyncio.sleep(0.1)


async def exec_all(stub: workspace_pb2_grpc.WorkspaceStub, thread: str, command: str) -> str:
    out = ""
    async for response in stub.Exec(workspace_pb2.ExecRequest(thread_id=thread, command=command)):
        if response.WhichOneof("kind") == "stdout":
            out += response.stdout.data.decode()
    return out


async def test_the_engine_going_away_is_unavailable_in_health_and_calls_then_recovers(
    make_docker_settings: Callable[..., Settings], proxy: EngineProxy
) -> None:
    settings = make_docker_settings(sandbox_engine="docker", sandbox_engine_probe_seconds=0.2)
    async with serving(settings) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        stub = workspace_pb2_grpc.WorkspaceStub(channel)
        await stub.WriteFile(
            workspace_pb2.WriteFileRequest(thread_id="t1", path="a.md", content="1")
        )
        assert await health_of(channel, WORKSPACE) == health_pb2.HealthCheckResponse.SERVING

        proxy.cut()
        for call in (
            stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="t1", path="a.md")),
            stub.WriteFile(
                workspace_pb2.WriteFileRequest(thread_id="t1", path="b.md", content="2")
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as away:
                await call
            assert away.value.code() is grpc.StatusCode.UNAVAILABLE, away.value.details()
            assert "Docker engine" in (away.value.details() or "")
            assert "Traceback" not in (away.value.details() or "")
        await wait_for_health(channel, WORKSPACE, health_pb2.HealthCheckResponse.NOT_SERVING)
        # What needs no engine still serves.
        assert await health_of(channel, "") == health_pb2.HealthCheckResponse.SERVING

        proxy.restore()
        await wait_for_health(channel, WORKSPACE, health_pb2.HealthCheckResponse.SERVING)
        read = await stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="t1", path="a.md"))
        assert read.content == "1"
        assert await exec_all(stub, "t1", "cat a.md; echo") == "1\n"


async def test_an_engine_that_comes_up_after_the_service_is_taken_up_then(
    make_docker_settings: Callable[..., Settings], proxy: EngineProxy
) -> None:
    proxy.cut()
    settings = make_docker_settings(sandbox_engine="docker", sandbox_engine_probe_seconds=0.2)
    async with serving(settings) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        stub = workspace_pb2_grpc.WorkspaceStub(channel)
        assert await health_of(channel, WORKSPACE) == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.aio.AioRpcError) as away:
            await stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="t1", path="a.md"))
        assert away.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "Docker engine" in (away.value.details() or "")
        proxy.restore()
        await wait_for_health(channel, WORKSPACE, health_pb2.HealthCheckResponse.SERVING)
        assert await exec_all(stub, "t1", "echo up") == "up\n"


async def test_a_command_cut_off_by_the_engine_ends_unavailable_and_the_thread_goes_on(
    make_docker_settings: Callable[..., Settings], proxy: EngineProxy
) -> None:
    async with serving(make_docker_settings(sandbox_engine="docker")) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        stub = workspace_pb2_grpc.WorkspaceStub(channel)
        assert await exec_all(stub, "t1", "echo warm") == "warm\n"
        running = asyncio.ensure_future(exec_all(stub, "t1", "echo started; sleep 30; echo end"))
        await asyncio.sleep(1.0)
        proxy.cut()
        with pytest.raises(grpc.aio.AioRpcError) as cut_off:
            await asyncio.wait_for(running, 60)
        assert cut_off.value.code() is grpc.StatusCode.UNAVAILABLE, cut_off.value.details()
        proxy.restore()
        assert await exec_all(stub, "t1", "echo again") == "again\n"


async def test_a_pooled_sandbox_stopped_from_outside_is_never_handed_out(
    make_docker_settings: Callable[..., Settings], engine: str
) -> None:
    settings = make_docker_settings(sandbox_engine=engine, sandbox_pool_size=1)
    async with serving(settings) as (app, channel):
        manager = app.parts.sandboxes.manager
        assert isinstance(manager, SandboxManager)
        deadline = time.monotonic() + 60
        while manager.pool.count() < 1:  # the start-up refill warms it
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        (pooled,) = manager.provider.pooled()
        stop_from_outside(pooled.id)  # an engine restart does this
        await app.parts.events.append("t1", "thread-created")
        stub = workspace_pb2_grpc.WorkspaceStub(channel)
        assert await exec_all(stub, "t1", "echo fine") == "fine\n"


async def test_a_sandbox_removed_from_outside_mid_call_is_made_again(
    make_docker_settings: Callable[..., Settings], engine: str
) -> None:
    async with serving(make_docker_settings(sandbox_engine=engine)) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        stub = workspace_pb2_grpc.WorkspaceStub(channel)
        await stub.WriteFile(
            workspace_pb2.WriteFileRequest(thread_id="t1", path="a.md", content="1")
        )
        running = asyncio.ensure_future(exec_all(stub, "t1", "sleep 30"))
        manager = app.parts.sandboxes.manager
        assert isinstance(manager, SandboxManager)
        container = manager.provider.container("t1")

        async def sleeping() -> bool:
            listing = await asyncio.to_thread(
                manager.engine.exec, container.id, ["ps", "-eo", "args"], workdir="/"
            )
            return "sleep 30" in listing.stdout.decode()

        await until(sleeping, "the command started")
        manager.engine.remove(container.id)  # the workspace volume stays
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await asyncio.wait_for(running, 60)
        assert gone.value.code() is grpc.StatusCode.UNAVAILABLE, gone.value.details()
        read = await stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="t1", path="a.md"))
        assert read.content == "1"
        assert await exec_all(stub, "t1", "echo back") == "back\n"


async def events_of(address: str, thread: str) -> list[dict[str, Any]]:
    async with grpc.aio.insecure_channel(address) as channel:
        stream = agent_pb2_grpc.AgentStub(channel).StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id=thread, follow=False)
        )
        return [
            {"id": r.event.id, "type": r.event.type, "payload": from_json(r.event.payload_json)}
            async for r in stream
        ]


async def test_a_server_killed_mid_command_leaves_no_command_running_and_no_call_open(
    tmp_path: Path, owner: str, sandbox_image: BuiltImage, engine: str
) -> None:
    env = docker_env(owner) | {"INSTANCE_AI_SANDBOX_ENGINE": engine}
    data = tmp_path / "data"
    server = await asyncio.to_thread(start_server, data, env=env)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            tools = ToolClient(channel, "t1")
            await tools.call("workspace_write_file", path="a.md", content="kept")
            call = asyncio.ensure_future(
                tools.call("workspace_execute_command", command="sleep 600")
            )
            container = None
            deadline = time.monotonic() + 30
            while container is None or "sleep 600" not in processes(container):
                assert time.monotonic() < deadline, "the command never started"
                await asyncio.sleep(0.2)
                found = owned_containers(owner)
                container = found[0] if found else None
            server.process.send_signal(signal.SIGKILL)
            with pytest.raises(grpc.aio.AioRpcError):
                await call
    finally:
        stop_server(server)
    assert "sleep 600" in processes(container)  # nobody killed it: its deadline died too

    restarted = await asyncio.to_thread(start_server, data, env=env)
    try:
        deadline = time.monotonic() + 30
        while "sleep 600" in processes(container):  # cleared at start-up, unasked
            assert time.monotonic() < deadline, "the leftover command is still running"
            await asyncio.sleep(0.2)
        events = await events_of(restarted.address, "t1")
        assert open_calls(events) == set()  # every call closed, the killed one interrupted
        assert any(e["type"] == "tool-call" for e in events)
        assert [e["type"] for e in events].count("tool-interrupted") == 1
        async with grpc.aio.insecure_channel(restarted.address) as channel:
            result = await ToolClient(channel, "t1").call(
                "workspace_execute_command", command="cat a.md"
            )
        assert "kept" in json.dumps(result)
    finally:
        stop_server(restarted)


def open_calls(events: list[dict[str, Any]]) -> set[str]:
    """Tool calls with no result, error or interruption."""
    calls = {e["payload"]["toolCallId"] for e in events if e["type"] == "tool-call"}
    ended = {
        e["payload"]["toolCallId"]
        for e in events
        if e["type"] in ("tool-result", "tool-error", "tool-interrupted")
    }
    return calls - ended


def processes(container: ContainerInfo) -> str:
    return exec_in(container, "ps", "-eo", "args").stdout.decode()


WORKFLOWS = Path(__file__).parent / "workflows"
SLOW_SOURCE = (
    "const until = Date.now() + 3000;\nwhile (Date.now() < until) {}\nexport default 42;\n"
)


async def build(channel: grpc.aio.Channel, path: str) -> pipeline_pb2.BuildWorkflowResponse:
    response: pipeline_pb2.BuildWorkflowResponse = await pipeline_pb2_grpc.PipelineStub(
        channel
    ).BuildWorkflow(pipeline_pb2.BuildWorkflowRequest(thread_id="t1", file_path=path))
    return response


async def test_the_engine_going_away_mid_build_is_unavailable_then_the_build_goes_through(
    make_docker_settings: Callable[..., Settings], proxy: EngineProxy
) -> None:
    async with serving(make_docker_settings(sandbox_engine="docker")) as (_app, channel):
        tools = ToolClient(channel, "t1")
        source = (WORKFLOWS / "switch.workflow.ts").read_text()
        await tools.call("workspace_write_file", path="src/slow.workflow.ts", content=SLOW_SOURCE)
        await tools.call("workspace_write_file", path="src/switch.workflow.ts", content=source)
        building = asyncio.ensure_future(build(channel, "src/slow.workflow.ts"))
        await asyncio.sleep(1.0)  # loading the source (3 s)
        proxy.cut()
        with pytest.raises(grpc.aio.AioRpcError) as away:
            await asyncio.wait_for(building, 60)
        assert away.value.code() is grpc.StatusCode.UNAVAILABLE, away.value.details()
        proxy.restore()
        built = await build(channel, "src/switch.workflow.ts")
        assert built.success, built.errors
        listed = await tools.call("list-workflows", status="all")
        assert [w["id"] for w in listed["workflows"]] == [built.workflow_id]


async def test_a_worker_killed_mid_compile_is_replaced_and_the_build_answers(
    make_docker_settings: Callable[..., Settings], engine: str
) -> None:
    async with serving(make_docker_settings(sandbox_engine=engine)) as (app, channel):
        tools = ToolClient(channel, "t1")
        await tools.call("workspace_write_file", path="src/slow.workflow.ts", content=SLOW_SOURCE)
        building = asyncio.ensure_future(build(channel, "src/slow.workflow.ts"))
        await asyncio.sleep(1.0)
        manager = app.parts.sandboxes.manager
        assert isinstance(manager, SandboxManager)
        container = manager.provider.container("t1")
        # The worker itself, not the init above it (whose arguments name it too).
        killed = manager.engine.exec(
            container.id, ["pkill", "-KILL", "-f", "^node /opt/app/bin/worker.mjs"], workdir="/"
        )
        assert killed.exit_code == 0  # there was a worker to kill
        answer = await asyncio.wait_for(building, 60)
        # A build answer, not an error: the call went on on a fresh worker.
        assert not answer.success and "export" in json.dumps([e.message for e in answer.errors]), (
            answer.errors
        )
        source = (WORKFLOWS / "switch.workflow.ts").read_text()
        await tools.call("workspace_write_file", path="src/switch.workflow.ts", content=source)
        assert (await build(channel, "src/switch.workflow.ts")).success


async def test_a_full_data_disk_answers_unavailable_and_loses_nothing(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(small)], check=True)
    try:
        async with serving(make_settings(data_dir=small / "data")) as (app, channel):
            tools = ToolClient(channel, "t1")
            for _ in range(3):
                await tools.call("list-credentials")
            filler = small / "filler"
            with filler.open("wb") as file, contextlib.suppress(OSError):
                while True:
                    file.write(b"\0" * 1024 * 1024)
                    file.flush()
            codes = Counter[str]()
            for _ in range(20):
                try:
                    await tools.call("list-credentials", type="x" * 4000)
                    codes["OK"] += 1
                except grpc.aio.AioRpcError as error:
                    codes[error.code().name] += 1
                    assert "free space" in (error.details() or ""), error.details()
            assert codes["UNAVAILABLE"] > 0 and set(codes) <= {"OK", "UNAVAILABLE"}, codes
            filler.unlink()
            await tools.call("list-credentials")  # room again: it works
            assert await health_of(channel, "") == health_pb2.HealthCheckResponse.SERVING
            events = await events_of(app.address, "t1")
            ids = [e["id"] for e in events]
            assert ids == list(range(1, len(ids) + 1))  # gapless: nothing half-written
            calls = {e["payload"]["toolCallId"] for e in events if e["type"] == "tool-call"}
            assert len(calls) >= 4
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=False)


async def test_a_server_killed_while_a_card_waits_resumes_on_confirm(
    tmp_path: Path, make_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(tool("run-workflow", {"workflowId": "wf-1"}), text("done after the crash"))
    data = tmp_path / "data"
    server = await asyncio.to_thread(start_server, data, env=model_env(model))
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            chat = Chat(channel)
            run_id = await chat.send("t1", "run it")
            card = await chat.card("t1")
    finally:
        stop_server(server)  # SIGKILL, with the card waiting
    async with serving(make_settings(data_dir=data, **with_model(model))) as (_app, channel):
        chat = Chat(channel)
        status = await chat.status("t1")
        assert status.is_suspended and status.active_run_id == run_id
        assert await chat.confirm("t1", card["requestId"], kind="approval", approved=True) == run_id
        events = await chat.finished("t1", run_id)
        assert of_type(events, "run-finish")[-1] == {"status": "completed"}
        assert of_type(events, "text-block")[-1]["text"] == "done after the crash"


async def test_a_server_killed_mid_build_leaves_the_call_closed_and_builds_again(
    tmp_path: Path, owner: str, sandbox_image: BuiltImage
) -> None:
    env = docker_env(owner)
    data = tmp_path / "data"
    slow_but_good = (
        SLOW_SOURCE.replace("export default 42;\n", "")
        + (WORKFLOWS / "switch.workflow.ts").read_text()
    )
    server = await asyncio.to_thread(start_server, data, env=env)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            tools = ToolClient(channel, "t1")
            await tools.call(
                "workspace_write_file", path="src/w.workflow.ts", content=slow_but_good
            )
            building = asyncio.ensure_future(
                tools.call("build-workflow", filePath="src/w.workflow.ts")
            )
            await asyncio.sleep(1.0)  # loading the source (3 s)
            server.process.send_signal(signal.SIGKILL)
            with pytest.raises(grpc.aio.AioRpcError):
                await building
    finally:
        stop_server(server)

    restarted = await asyncio.to_thread(start_server, data, env=env)
    try:
        async with grpc.aio.insecure_channel(restarted.address) as channel:
            tools = ToolClient(channel, "t1")
            assert (await tools.call("list-workflows", status="all"))["workflows"] == []
            built = await tools.call("build-workflow", filePath="src/w.workflow.ts")
            assert built["success"] is True
            listed = await tools.call("list-workflows", status="all")
            assert [w["id"] for w in listed["workflows"]] == [built["workflowId"]]
        events = await events_of(restarted.address, "t1")
        interrupted = [e for e in events if e["type"] == "tool-interrupted"]
        assert len(interrupted) == 1  # the killed build, closed at start-up
        assert open_calls(events) == set()
    finally:
        stop_server(restarted)


async def test_a_read_only_database_answers_unavailable_then_recovers(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings()
    database = settings.data_dir / "instance-ai.db"
    files = [database, database.with_name(database.name + "-wal")]
    async with serving(settings) as (app, channel):
        tools = ToolClient(channel, "t1")
        await tools.call("list-credentials")
        # Immutable: not even root may write them (a permission bit would not stop root).
        subprocess.run(["chattr", "+i", *map(str, files)], check=True)
        try:
            with pytest.raises(grpc.aio.AioRpcError) as read_only:
                await tools.call("list-credentials")
            assert read_only.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "permissions" in (read_only.value.details() or "")
        finally:
            subprocess.run(["chattr", "-i", *map(str, files)], check=True)
        await tools.call("list-credentials")  # writable again: it works
        assert await health_of(channel, "") == health_pb2.HealthCheckResponse.SERVING
        events = await events_of(app.address, "t1")
        assert [e["id"] for e in events] == list(range(1, len(events) + 1))
