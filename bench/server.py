"""A server for benchmarks: real gRPC on loopback, real sandboxes under a throw-away owner
label (everything it made is removed afterwards, on either engine), and a timer inside the
sandbox."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from bench.sandbox import cleanup
from instance_ai.json_text import to_json
from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from sandbox.docker_engine import DockerEngine
from sandbox.runsc_engine import RunscEngine
from server.app import Application
from server.logs import configure_logging
from server.settings import load_settings


@contextlib.asynccontextmanager
async def bench_server(**overrides: Any) -> AsyncIterator[tuple[Application, grpc.aio.Channel]]:
    configure_logging(level="warning")
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as data_dir:
        defaults: dict[str, Any] = {"sandbox_pool_size": 0}  # no pool unless asked for
        settings = load_settings(
            port=0, data_dir=Path(data_dir), sandbox_owner=owner, **(defaults | overrides)
        )
        try:
            async with (
                Application(settings) as app,
                grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel,
            ):
                yield app, channel
        finally:
            # Whichever engine drove its sandboxes: Docker, or runsc itself (the default).
            engine = DockerEngine.connect()
            cleanup(engine, owner)
            cleanup(RunscEngine(engine.client, settings.sandbox_runsc_root), owner)
            engine.close()


async def time_in_sandbox(app: Application, thread: str, command: str) -> float:
    """Milliseconds `command` takes, measured inside the thread's container (no exec cost)."""
    manager = await app.parts.sandboxes.for_thread(thread)
    timed = (
        f"s=$(date +%s%N); {command} >/dev/null 2>&1; e=$(date +%s%N); "
        "echo $(( (e - s) / 1000000 ))"
    )
    result = await manager.run_command(thread, timed)
    return float(result.stdout.strip())


async def write_source(
    tools: tools_pb2_grpc.ToolsStub, thread: str, path: str, content: str
) -> None:
    """Write `content` into the thread's workspace at `path`, as a client would."""
    await tools.CallTool(
        tools_pb2.CallToolRequest(
            thread_id=thread,
            tool_name="workspace_write_file",
            arguments_json=to_json({"path": path, "content": content}),
        )
    )
