"""The `instance-ai` command, run as a user runs it: a real process, real signals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import typer
from typer.testing import CliRunner

from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from sandbox.engine import SandboxLimits
from server.runtime.events import EventLog
from server.settings import DATABASE_FILE_NAME
from server.store import Database
from tests.sandbox_fixtures import BUILD_CACHE

CLI = str(Path(sys.executable).parent / "instance-ai")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@dataclass
class ServerProcess:
    process: subprocess.Popen[str]
    address: str
    stderr_lines: list[str]


def start_server(
    data_dir: Path, *args: str, env: dict[str, str] | None = None, cli: str = CLI
) -> ServerProcess:
    # These tests need no sandboxes (and must leave none behind in the default owner).
    env = {"INSTANCE_AI_SANDBOX_PROVIDER": "none", **(env or {})}
    process = subprocess.Popen(
        [cli, "serve", "--port", "0", "--data-dir", str(data_dir), "--log-format", "json", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
    )
    assert process.stderr is not None
    lines: list[str] = []
    for line in process.stderr:
        lines.append(line)
        record = json.loads(line)
        if record.get("event") == "serving":
            return ServerProcess(process, record["address"], lines)
    process.wait()
    process.stderr.close()
    raise AssertionError("server did not start:\n" + "".join(lines))


def stop_server(server: ServerProcess) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    if server.process.stderr is not None:
        server.process.stderr.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    running = start_server(tmp_path / "data")
    yield running
    stop_server(running)


async def populate(data_dir: Path, thread_id: str, count: int) -> None:
    db = await Database.open(f"sqlite+aiosqlite:///{data_dir / DATABASE_FILE_NAME}")
    async with EventLog(db=db) as log:
        await asyncio.gather(
            *(log.append(thread_id, "tick", {"n": n, "pad": "p" * 200}) for n in range(count))
        )
    await db.close()


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [
        (["--port", "70000"], {}, "port (INSTANCE_AI_PORT)"),
        ([], {"INSTANCE_AI_PORT": "not-a-port"}, "port (INSTANCE_AI_PORT)"),
        ([], {"INSTANCE_AI_LOG_FORMAT": "xml"}, "log_format (INSTANCE_AI_LOG_FORMAT)"),
        ([], {"INSTANCE_AI_DATABASE_URL": "mysql://x"}, "database_url"),
        ([], {"INSTANCE_AI_API_KEYS_FILE": "/no/such/file"}, "api_keys_file"),
        ([], {"INSTANCE_AI_TLS_CERT_FILE": "/etc/hostname"}, "tls_key_file"),
        (["--config", "/no/such/config.toml"], {}, "config file /no/such/config.toml"),
        (["--sandbox-api", "nowhere"], {}, "sandbox_api_address (INSTANCE_AI_SANDBOX_API_ADDRESS)"),
    ],
)
def test_a_bad_setting_exits_2_naming_the_setting(
    tmp_path: Path, args: list[str], env: dict[str, str], names: str
) -> None:
    result = run_cli("serve", "--data-dir", str(tmp_path), *args, env=env)
    assert result.returncode == 2, result.stderr
    assert names in result.stderr


def test_a_config_file_is_read_and_checked(tmp_path: Path) -> None:
    config = tmp_path / "instance-ai.toml"
    config.write_text('log_format = "json"\nshutdown_grace_seconds = -1\n')
    result = run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert "shutdown_grace_seconds" in result.stderr
    config.write_text('log_formt = "json"\n')
    result = run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert "unknown setting log_formt" in result.stderr


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _whole_on_a_line(output: str, *texts: str) -> bool:
    return any(all(text in line for text in texts) for line in output.splitlines())


@pytest.mark.parametrize("module", ["instance_ai_cli.main", "instance_ai_cli.mcp"])
def test_every_help_reads_as_sentences(module: str) -> None:
    """No sentence of a `--help` is cut by the docstring's line breaks: on a terminal wide
    enough, each paragraph of a command's help, and each command's line in its group's list,
    is printed on one line."""
    from instance_ai_cli.main import app
    from instance_ai_cli.mcp import light_app

    typer_app = app if module == "instance_ai_cli.main" else light_app
    checked = 0
    for path, command in _commands(typer.main.get_command(typer_app)):
        result = CliRunner().invoke(typer_app, [*path, "--help"], env={"COLUMNS": "1000"})
        assert result.exit_code == 0, (path, result.output)
        for paragraph in (command.help or "").split("\n\n"):
            assert _whole_on_a_line(result.output, _one_line(paragraph)), (path, paragraph)
            checked += 1
        for name, sub in getattr(command, "commands", {}).items():
            summary = _one_line((sub.help or "").split("\n\n")[0])
            assert _whole_on_a_line(result.output, f" {name} ", summary), (path, name)
    assert checked >= (25 if typer_app is app else 2)
    # The executable prints the same list of commands.
    if typer_app is app:
        printed = run_cli("--help", env={"COLUMNS": "1000"})
        assert printed.returncode == 0, printed.stderr
        chat = _one_line(dict(_commands(typer.main.get_command(app)))[("chat",)].help or "")
        assert "checklists and confirmation cards" in chat
        assert _whole_on_a_line(printed.stdout, " chat ", chat)


def test_health_json_reports_serving(server: ServerProcess) -> None:
    result = run_cli("health", "--server", server.address, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "SERVING"
    assert set(report["services"]) == {
        "instance_ai.v1.Agent",
        "instance_ai.v1.Tools",
        "instance_ai.v1.Workspace",
        "instance_ai.v1.Pipeline",
        "instance_ai.v1.Credentials",
        "instance_ai.v1.Browser",
        "instance_ai.v1.Gateway",
    }
    assert set(report["services"].values()) == {"SERVING"}


def test_health_says_clearly_when_nothing_listens() -> None:
    result = run_cli("health", "--server", "127.0.0.1:1", "--timeout", "2")
    assert result.returncode == 1
    assert "cannot reach 127.0.0.1:1" in result.stderr


def test_events_prints_json_and_people_text(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    asyncio.run(populate(data_dir, "thread-1", 5))
    running = start_server(data_dir)
    try:
        as_json = run_cli(
            "events", "thread-1", "--after", "2", "--json", "--server", running.address
        )
        assert as_json.returncode == 0, as_json.stderr
        document = json.loads(as_json.stdout)
        assert [e["id"] for e in document["events"]] == [3, 4, 5]
        assert document["events"][0]["type"] == "tick"
        assert document["events"][0]["threadId"] == "thread-1"

        for_people = run_cli("events", "thread-1", "--server", running.address)
        assert for_people.returncode == 0
        assert for_people.stdout.count("tick") == 5 and "#5" in for_people.stdout

        missing = run_cli("events", "nope", "--server", running.address)
        assert missing.returncode == 1
        assert "NOT_FOUND" in missing.stderr and "does not exist" in missing.stderr
    finally:
        stop_server(running)


async def _first_then_rest(call: grpc.aio.UnaryStreamCall) -> AsyncIterator[int]:
    async for response in call:
        yield response.event.id


async def test_sigterm_drains_in_flight_calls_then_exits(tmp_path: Path) -> None:
    """An in-flight replay of 20,000 events completes after SIGTERM; new calls are refused;
    a live follower is ended with where to resume; the process exits 0."""
    data_dir = tmp_path / "data"
    total = 20_000
    await populate(data_dir, "big", total)
    running = start_server(data_dir, env={"INSTANCE_AI_SHUTDOWN_GRACE_SECONDS": "60"})
    try:
        async with grpc.aio.insecure_channel(running.address) as channel:
            agent = agent_pb2_grpc.AgentStub(channel)
            follower = agent.StreamEvents(
                agent_pb2.StreamEventsRequest(thread_id="big", after=str(total - 1), follow=True)
            )
            assert (await anext(aiter(follower))).event.id == total  # now it is live
            replay = agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id="big"))
            ids = _first_then_rest(replay)
            received = [await anext(ids)]

            running.process.send_signal(signal.SIGTERM)
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                async for _ in follower:
                    pass
            assert ended.value.code() is grpc.StatusCode.UNAVAILABLE
            assert f"after={total}" in (ended.value.details() or "")

            async with grpc.aio.insecure_channel(running.address) as fresh:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await agent_pb2_grpc.AgentStub(fresh).GetThreadStatus(
                        agent_pb2.GetThreadStatusRequest(thread_id="big"), timeout=5
                    )
                assert refused.value.code() is grpc.StatusCode.UNAVAILABLE

            received += [event_id async for event_id in ids]
        assert received == list(range(1, total + 1))
        exit_code = await asyncio.to_thread(running.process.wait, 30)
        assert exit_code == 0
        assert any('"stopped"' in line for line in running.process.stderr or [])
    finally:
        stop_server(running)


@pytest.fixture
def sandbox_env(tmp_path: Path, owner: str, sandbox_image: object) -> dict[str, str]:
    return {"INSTANCE_AI_SANDBOX_OWNER": owner, "INSTANCE_AI_DATA_DIR": str(tmp_path / "data")}


def test_sandbox_exec_prints_output_and_exits_with_the_command_code(
    sandbox_env: dict[str, str],
) -> None:
    result = run_cli(
        "sandbox", "exec", "cli-thread", "--", "echo hi; echo oops >&2; exit 3", env=sandbox_env
    )
    assert (result.returncode, result.stdout, result.stderr.strip()) == (3, "hi\n", "oops")
    # Several arguments are the argv, each word kept whole.
    quoted = run_cli(
        "sandbox", "exec", "cli-thread", "--", "sh", "-c", "echo hi 'there';", env=sandbox_env
    )
    assert (quoted.returncode, quoted.stdout) == (0, "hi there\n"), quoted.stderr
    spaced = run_cli(
        "sandbox", "exec", "cli-thread", "--", "printf", "%s|", "a b", "$HOME", env=sandbox_env
    )
    assert spaced.stdout == "a b|$HOME|"
    timed = run_cli(
        "sandbox", "exec", "cli-thread", "--timeout", "1", "--", "sleep 30", env=sandbox_env
    )
    assert timed.returncode == 124
    assert "timed out" in timed.stderr


def test_sandbox_ls_and_gc(sandbox_env: dict[str, str], sandbox_limits: SandboxLimits) -> None:
    assert run_cli("sandbox", "exec", "gone-thread", "--", "true", env=sandbox_env).returncode == 0
    listed = json.loads(run_cli("sandbox", "ls", "--json", env=sandbox_env).stdout)
    assert [s["thread"] for s in listed["sandboxes"]] == ["gone-thread"]
    # Under the runtime the service chose (gVisor here, by default).
    assert [s["runtime"] for s in listed["sandboxes"]] == [sandbox_limits.runtime]
    # The thread does not exist in this data directory's store: gc removes its sandbox.
    collected = json.loads(run_cli("sandbox", "gc", "--json", env=sandbox_env).stdout)
    assert collected["removedSandboxes"] == ["gone-thread"]
    listed = json.loads(run_cli("sandbox", "ls", "--json", env=sandbox_env).stdout)
    assert listed["sandboxes"] == []


def test_sandbox_build_image_is_a_no_op_when_built(sandbox_env: dict[str, str]) -> None:
    result = run_cli(
        "sandbox", "build-image", "--cache-dir", str(BUILD_CACHE), "--json", env=sandbox_env
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["built"] == [] and report["image"].startswith("instance-ai-sandbox:")
