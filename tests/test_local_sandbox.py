"""The local provider: no isolation, but the same confinement, deadlines and caps."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc, workspace_pb2, workspace_pb2_grpc
from sandbox.commands import CommandRunner
from sandbox.errors import FileTooLargeError, PathEscapeError
from sandbox.local_engine import LocalEngine
from sandbox.manager import MARKER, SandboxManager
from sandbox.provider import SandboxProvider
from server.settings import Settings
from tests.conftest import serving


def host_processes() -> str:
    return subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[SandboxManager]:
    """The one sandbox manager, on the local engine (as INSTANCE_AI_SANDBOX_PROVIDER=local
    sets it up)."""
    engine = LocalEngine(tmp_path / "sandboxes")
    manager = SandboxManager(
        SandboxProvider(engine, image="local", owner="test"),
        runner=CommandRunner(engine, max_output_bytes=100),
        max_file_bytes=1000,
        use_worker=False,
    )
    yield manager
    await manager.close()


def workspace_of(manager: SandboxManager, thread_id: str) -> Path:
    volume = manager.provider.container(thread_id).workspace_volume
    assert volume is not None
    found = manager.engine.volume(volume)
    assert found is not None and found.mountpoint is not None
    return found.mountpoint


def test_it_says_loudly_that_it_does_not_isolate(tmp_path: Path) -> None:
    with capture_logs() as logs:
        LocalEngine(tmp_path)
    assert any(
        "DO NOT ISOLATE" in entry["event"] and entry["log_level"] == "warning" for entry in logs
    )


async def test_files_are_confined_and_seeded(local: SandboxManager, tmp_path: Path) -> None:
    await local.write_file("t1", "src/a.txt", b"hello hello")
    assert await local.read_file("t1", "src/a.txt") == b"hello hello"
    assert await local.str_replace("t1", "src/a.txt", "hello", "bye", replace_all=True) == 2
    names = {e.path for e in (await local.list_files("t1"))[0]}
    assert {MARKER, "src", "tsconfig.json", "knowledge-base"} <= names
    workspace = workspace_of(local, "t1")
    assert "t1" not in str(workspace)  # named by the hashed id, never the caller's text
    (workspace / "out").symlink_to(tmp_path)
    for escape in ("../x", "/etc/passwd", "out/x"):
        with pytest.raises(PathEscapeError):
            await local.read_file("t1", escape)
        with pytest.raises(PathEscapeError):
            await local.write_file("t1", escape, b"x")
    with pytest.raises(FileTooLargeError):
        await local.write_file("t1", "big", b"x" * 1001)


async def test_the_deadline_and_the_end_of_a_command_kill_its_whole_tree(
    local: SandboxManager,
) -> None:
    result = await local.run_command(
        "t1", "setsid sleep 4241 & sleep 4242 & echo started; wait", timeout_s=1
    )
    assert result.timed_out and result.stdout == "started\n"
    finished = await local.run_command("t1", "setsid sleep 4243 & echo done", timeout_s=30)
    assert finished.success and not finished.timed_out
    processes = host_processes()
    assert not any(f"sleep {n}" in processes for n in (4241, 4242, 4243))


async def test_cancelling_kills_the_tree(local: SandboxManager) -> None:
    task = asyncio.create_task(local.run_command("t1", "setsid sleep 4244 & sleep 4245"))
    for _ in range(100):
        if "sleep 4245" in host_processes():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    processes = host_processes()
    assert "sleep 4244" not in processes and "sleep 4245" not in processes


async def test_the_service_environment_never_reaches_a_command(
    local: SandboxManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTANCE_AI_API_KEYS", "planted-secret-123")
    result = await local.run_command("t1", "env", timeout_s=30)
    assert "planted-secret-123" not in result.stdout
    assert "HOME=" in result.stdout


async def test_cut_output_is_kept_in_full(local: SandboxManager) -> None:
    result = await local.run_command("t1", "seq 1 5000", timeout_s=30)
    assert result.truncated and len(result.stdout) == 100 and result.full_output_path
    saved = await local.read_result("t1", result.full_output_path)
    assert saved.decode().splitlines() == [str(n) for n in range(1, 5001)]


async def test_the_workspace_service_runs_on_it(make_settings: Callable[..., Settings]) -> None:
    async with serving(make_settings(sandbox_provider="local")) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        stub = workspace_pb2_grpc.WorkspaceStub(channel)
        await stub.WriteFile(workspace_pb2.WriteFileRequest(thread_id="t1", path="a", content="x"))
        read = await stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="t1", path="a"))
        assert read.content == "x"
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="t1", path="../../x"))
        assert error.value.code() is grpc.StatusCode.PERMISSION_DENIED


async def test_building_says_it_needs_docker(make_settings: Callable[..., Settings]) -> None:
    async with serving(make_settings(sandbox_provider="local")) as (app, channel):
        await app.parts.events.append("t1", "thread-created")
        stub = pipeline_pb2_grpc.PipelineStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.BuildWorkflow(
                pipeline_pb2.BuildWorkflowRequest(thread_id="t1", file_path="src/a.workflow.ts")
            )
        assert error.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "INSTANCE_AI_SANDBOX_PROVIDER=docker" in (error.value.details() or "")
