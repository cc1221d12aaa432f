"""The Workspace service over real gRPC, backed by real Docker sandboxes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from instance_ai.v1 import agent_pb2, agent_pb2_grpc, workspace_pb2, workspace_pb2_grpc
from sandbox.engine import JobLimits, SandboxLimits
from sandbox.image.build import BuiltImage
from sandbox.manager import SandboxManager
from sandbox.runtimes import GVISOR_HOST_PIDS_FACTOR, GVISOR_KERNEL_MEMORY, RUNSC
from server.app import Application
from server.settings import Settings
from tests.conftest import serving
from tests.sandbox_fixtures import HostView, output_of


@pytest.fixture
async def workspace_app(
    make_settings: Callable[..., Settings], owner: str, sandbox_image: BuiltImage
) -> AsyncIterator[tuple[Application, workspace_pb2_grpc.WorkspaceStub]]:
    settings = make_settings(
        sandbox_provider="docker",
        sandbox_owner=owner,
        sandbox_max_file_bytes=64 * 1024,
        sandbox_max_output_bytes=2048,
    )
    async with serving(settings) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        yield app, workspace_pb2_grpc.WorkspaceStub(channel)


def docker_manager(app: Application) -> SandboxManager:
    manager = app.parts.sandboxes.manager
    assert isinstance(manager, SandboxManager)
    return manager


async def exec_all(
    stub: workspace_pb2_grpc.WorkspaceStub, command: str, **fields: Any
) -> tuple[bytes, bytes, workspace_pb2.ExitStatus]:
    out, err = b"", b""
    async for response in stub.Exec(
        workspace_pb2.ExecRequest(thread_id="t1", command=command, **fields)
    ):
        kind = response.WhichOneof("kind")
        if kind == "stdout":
            out += response.stdout.data
        elif kind == "stderr":
            err += response.stderr.data
        else:
            return out, err, response.exit
    raise AssertionError("no exit record")


async def test_files_round_trip(workspace_app: tuple[Application, Any]) -> None:
    _, stub = workspace_app
    written = await stub.WriteFile(
        workspace_pb2.WriteFileRequest(thread_id="t1", path="src/a.ts", content="one\ntwo\nthree\n")
    )
    assert written.bytes_written == 14
    read = await stub.ReadFile(
        workspace_pb2.ReadFileRequest(thread_id="t1", path="src/a.ts", start_line=2, max_lines=1)
    )
    assert (read.content, read.total_lines, read.truncated) == ("two\n", 3, True)
    replaced = await stub.StrReplace(
        workspace_pb2.StrReplaceRequest(thread_id="t1", path="src/a.ts", old_str="two", new_str="2")
    )
    assert replaced.replacements == 1
    listing = await stub.ListFiles(
        workspace_pb2.ListFilesRequest(thread_id="t1", path="src", recursive=True)
    )
    entries = {e.path: (e.type, e.size) for e in listing.entries}
    assert entries["a.ts"] == ("file", 12)


@pytest.mark.parametrize(
    ("request_", "code", "says"),
    [
        (workspace_pb2.ReadFileRequest(thread_id="ghost", path="a"), "NOT_FOUND", "does not exist"),
        (
            workspace_pb2.ReadFileRequest(thread_id="bad id", path="a"),
            "INVALID_ARGUMENT",
            "thread id",
        ),
        (
            workspace_pb2.ReadFileRequest(thread_id="t1", path="../etc/passwd"),
            "PERMISSION_DENIED",
            "outside",
        ),
        (
            workspace_pb2.ReadFileRequest(thread_id="t1", path="/etc/passwd"),
            "PERMISSION_DENIED",
            "outside",
        ),
        (
            workspace_pb2.ReadFileRequest(thread_id="t1", path="nope.txt"),
            "NOT_FOUND",
            "does not exist",
        ),
        (
            workspace_pb2.WriteFileRequest(thread_id="t1", path="big", content="x" * 70_000),
            "RESOURCE_EXHAUSTED",
            "limit",
        ),
        (
            workspace_pb2.StrReplaceRequest(
                thread_id="t1", path="seed.txt", old_str="a", new_str="b"
            ),
            "FAILED_PRECONDITION",
            "matches 2 places",
        ),
    ],
)
async def test_bad_requests_get_the_right_status_and_change_nothing(
    workspace_app: tuple[Application, Any], request_: Any, code: str, says: str
) -> None:
    _, stub = workspace_app
    await stub.WriteFile(
        workspace_pb2.WriteFileRequest(thread_id="t1", path="seed.txt", content="a a")
    )
    method = {
        workspace_pb2.ReadFileRequest: stub.ReadFile,
        workspace_pb2.WriteFileRequest: stub.WriteFile,
        workspace_pb2.StrReplaceRequest: stub.StrReplace,
    }[type(request_)]
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await method(request_)
    assert error.value.code().name == code
    assert says in (error.value.details() or "")
    seed = await stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="t1", path="seed.txt"))
    assert seed.content == "a a"
    listing = await stub.ListFiles(workspace_pb2.ListFilesRequest(thread_id="t1"))
    assert "big" not in {e.path for e in listing.entries}


async def test_exec_streams_output_then_the_exit(workspace_app: tuple[Application, Any]) -> None:
    _, stub = workspace_app
    out, err, exit_status = await exec_all(stub, "echo out; echo err >&2; exit 4")
    assert (out, err, exit_status.exit_code, exit_status.timed_out) == (
        b"out\n",
        b"err\n",
        4,
        False,
    )
    _, _, timed = await exec_all(stub, "sleep 30", timeout_ms=500)
    assert timed.timed_out


async def test_cut_output_is_paged_back_completely(workspace_app: tuple[Application, Any]) -> None:
    _, stub = workspace_app
    out, _, exit_status = await exec_all(stub, "seq 1 20000")
    assert len(out) == 2048 and exit_status.result_id
    text, offset = "", 0
    while True:
        page = await stub.ReadToolResult(
            workspace_pb2.ReadToolResultRequest(
                thread_id="t1", path=exit_status.result_id, offset=offset, max_chars=20_000
            )
        )
        text += page.content
        if not page.HasField("next_offset"):
            break
        offset = page.next_offset
    assert text.splitlines() == [str(n) for n in range(1, 20001)]
    assert page.total == len(text)


async def test_json_results_can_be_described_and_read_by_pointer(
    workspace_app: tuple[Application, Any],
) -> None:
    _, stub = workspace_app
    document = {"data": {"items": [{"id": n, "name": f"item {n}"} for n in range(250)]}}
    await stub.WriteFile(
        workspace_pb2.WriteFileRequest(thread_id="t1", path="r.json", content=json.dumps(document))
    )
    described = await stub.ReadToolResult(
        workspace_pb2.ReadToolResultRequest(thread_id="t1", path="r.json", view="describe")
    )
    shape = json.loads(described.content)
    assert shape["json"]["keys"]["data"]["keys"]["items"]["length"] == 250
    page = await stub.ReadToolResult(
        workspace_pb2.ReadToolResultRequest(
            thread_id="t1", path="r.json", view="json", pointer="/data/items", offset=200, limit=100
        )
    )
    assert [item["id"] for item in json.loads(page.content)] == list(range(200, 250))
    assert page.total == 250 and not page.HasField("next_offset")
    for bad in (
        workspace_pb2.ReadToolResultRequest(
            thread_id="t1", path="r.json", view="json", pointer="/nope"
        ),
        workspace_pb2.ReadToolResultRequest(thread_id="t1", path="r.json", view="json", limit=101),
        workspace_pb2.ReadToolResultRequest(thread_id="t1", path="r.json", view="xml"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.ReadToolResult(bad)
        assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_a_client_that_goes_away_kills_its_command(
    workspace_app: tuple[Application, Any],
) -> None:
    app, stub = workspace_app
    call = stub.Exec(
        workspace_pb2.ExecRequest(thread_id="t1", command="echo go; setsid sleep 310 & sleep 311")
    )
    stream = aiter(call)
    assert (await anext(stream)).stdout.data == b"go\n"
    call.cancel()
    container = await docker_manager(app).acquire("t1")
    for _ in range(100):
        processes = output_of(docker_manager(app).engine, container, "ps", "-eo", "args=")
        if "sleep 310" not in processes and "sleep 311" not in processes:
            break
        await asyncio.sleep(0.1)
    assert "sleep 310" not in processes and "sleep 311" not in processes


async def test_deleting_the_thread_destroys_its_sandbox(
    workspace_app: tuple[Application, Any],
) -> None:
    app, stub = workspace_app
    await stub.WriteFile(workspace_pb2.WriteFileRequest(thread_id="t1", path="x", content="x"))
    provider = docker_manager(app).provider
    assert provider.get("t1") is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        await agent_pb2_grpc.AgentStub(channel).DeleteThread(
            agent_pb2.DeleteThreadRequest(thread_id="t1")
        )
    assert provider.get("t1") is None


async def test_an_unreachable_engine_is_unavailable_with_what_to_do(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    async with serving(make_settings(sandbox_provider="docker")) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await workspace_pb2_grpc.WorkspaceStub(channel).ReadFile(
                workspace_pb2.ReadFileRequest(thread_id="t1", path="a")
            )
    assert error.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "start dockerd" in (error.value.details() or "")


async def test_the_hardening_settings_reach_the_container(
    make_docker_settings: Callable[..., Settings], sandbox_limits: SandboxLimits
) -> None:
    settings = make_docker_settings(
        sandbox_memory_mb=512,
        sandbox_pids_limit=128,
        sandbox_cpus=0.5,
        sandbox_tmp_size="64m",
    )
    async with serving(settings) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        stub = workspace_pb2_grpc.WorkspaceStub(channel)
        await stub.WriteFile(workspace_pb2.WriteFileRequest(thread_id="t1", path="x", content="x"))
        container = await docker_manager(app).acquire("t1")
        host = HostView.of(container)  # Docker's, or the runsc engine's own bundle
        if sandbox_limits.runtime == RUNSC:
            # gVisor: the host's limits are backstops; the sandbox's own kernel keeps each
            # command to its tasks (tests/test_sandbox.py checks how).
            expected = (512 * 2**20 + GVISOR_KERNEL_MEMORY, 128 * GVISOR_HOST_PIDS_FACTOR)
            limits = docker_manager(app).provider.job_limits
            assert limits == JobLimits(processes=128)
        else:
            expected = (512 * 2**20, 128)
        assert (host.memory, host.pids, host.nano_cpus) == (*expected, 5 * 10**8)
        assert "size=64m" in host.tmp_options
        assert host.read_only and host.network == "none" and host.runtime == sandbox_limits.runtime
