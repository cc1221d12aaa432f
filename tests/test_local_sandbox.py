"""The local provider: no isolation, but the same confinement, deadlines and caps."""

from __future__ import annotations

import asyncio
import fcntl
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc, workspace_pb2, workspace_pb2_grpc
from sandbox import local_engine
from sandbox.commands import CommandRunner
from sandbox.errors import FileTooLargeError, PathEscapeError
from sandbox.image.rootfs import WORKSPACE
from sandbox.local_engine import LocalEngine
from sandbox.manager import MARKER, SandboxManager
from sandbox.provider import SandboxProvider
from sandbox.search import GrepQuery
from server.settings import Settings
from tests.conftest import serving


# A process that holds a lock on a file while it lives (a lock goes with its holder), so a
# test can tell whether it survived without looking at the machine's processes.
def hold(lock: str) -> str:
    return f"flock -x {lock} sleep 120"


# After a kill, how long a survivor would have to take its lock again.
SETTLE_S = 0.5


def held(lock: Path) -> bool:
    """Whether a live process holds `lock`."""
    if not lock.exists():
        return False
    with lock.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    for _ in range(int(within / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the processes did not start")


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


async def started_workspace(manager: SandboxManager) -> Path:
    await manager.acquire("t1")
    return workspace_of(manager, "t1")


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
    found = await local.grep("t1", GrepQuery(pattern=r"b\w+", path="src"))
    assert [(f.path, f.line, f.text) for f in found.lines] == [("src/a.txt", 1, "bye bye")]
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
    workspace = await started_workspace(local)
    result = await local.run_command(
        "t1", f"setsid {hold('l1')} & {hold('l2')} & echo started; wait", timeout_s=1
    )
    assert result.timed_out and result.stdout == "started\n"
    finished = await local.run_command("t1", f"setsid {hold('l3')} & echo done", timeout_s=30)
    assert finished.success and not finished.timed_out
    await asyncio.sleep(SETTLE_S)
    assert [lock for lock in ("l1", "l2", "l3") if held(workspace / lock)] == []


async def test_a_tree_dies_without_reading_other_processes(
    local: SandboxManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No scan of every process's environment (it can block on any stuck process of the
    machine): the command's own PID namespace takes children that left its process group."""

    def no_scan() -> None:
        raise AssertionError("the local engine scanned /proc")

    monkeypatch.setattr(local_engine, "_processes", no_scan)
    assert isinstance(local.engine, LocalEngine) and local.engine.uses_pid_namespaces
    workspace = await started_workspace(local)
    result = await local.run_command("t1", f"setsid {hold('l6')} & echo started; wait", timeout_s=1)
    assert result.timed_out and result.stdout == "started\n"
    finished = await local.run_command("t1", f"setsid {hold('l7')} & exit 3", timeout_s=30)
    assert finished.exit_code == 3
    await asyncio.sleep(SETTLE_S)
    assert not held(workspace / "l6") and not held(workspace / "l7")


async def test_another_service_process_finds_and_kills_what_was_left(
    local: SandboxManager, tmp_path: Path
) -> None:
    """After a crash, the next service process (another engine over the same directory)
    sees the jobs still running and ends them."""
    container = await local.acquire("t1")
    workspace = workspace_of(local, "t1")
    attached = local.engine.exec_attached(
        container.id, ["sh", "-c", f"setsid {hold('l8')} & {hold('l9')}"], workdir=WORKSPACE, job=7
    )
    try:
        await until(lambda: held(workspace / "l8") and held(workspace / "l9"))
        successor = LocalEngine(tmp_path / "sandboxes")
        assert successor.running_jobs(container.id, range(1, 100)) == [7]
        assert successor.kill_job(container.id, 7)
        await asyncio.sleep(SETTLE_S)
        assert not held(workspace / "l8") and not held(workspace / "l9")
        assert successor.running_jobs(container.id, range(1, 100)) == []
    finally:
        attached.close()


async def test_a_command_keeps_its_stdin_and_its_own_signals(local: SandboxManager) -> None:
    """Inside its namespace a command is not the first process (which ignores signals it has
    no handler for): it can kill itself, and says so as a shell would; and what is written to
    its stdin reaches it."""
    killed = await local.run_command("t1", "echo before; kill -9 $$; echo after", timeout_s=30)
    assert killed.exit_code == 137 and killed.stdout == "before\n" and killed.stderr == ""
    container = await local.acquire("t1")
    attached = local.engine.exec_attached(
        container.id, ["tr", "a-z", "A-Z"], workdir=WORKSPACE, stdin=True
    )
    try:
        attached.socket.sendall(b"hello stdin")
        attached.socket.shutdown(socket.SHUT_WR)
        output = await asyncio.to_thread(lambda: b"".join(data for _, data in attached.frames()))
    finally:
        attached.close()
    assert output == b"HELLO STDIN"


async def test_cancelling_kills_the_tree(local: SandboxManager) -> None:
    workspace = await started_workspace(local)
    task = asyncio.create_task(local.run_command("t1", f"setsid {hold('l4')} & {hold('l5')}"))
    await until(lambda: held(workspace / "l4") and held(workspace / "l5"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(SETTLE_S)
    assert not held(workspace / "l4") and not held(workspace / "l5")


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
