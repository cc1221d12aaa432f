"""Real MCP parts for the tests: the demo MCP server (tests/mcp_demo_server.py) over stdio
and over Streamable HTTP, and a filesystem gateway run as a user runs it (`instance-ai
gateway`, a real process connecting out to the service's HTTP endpoint)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from instance_ai.v1 import gateway_pb2, gateway_pb2_grpc
from server.app import Application
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "instance-ai")


def demo_stdio() -> dict[str, Any]:
    """The demo server as a stdio server of INSTANCE_AI_MCP_SERVERS."""
    return {"command": [sys.executable, "-m", "tests.mcp_demo_server", "stdio"], "cwd": str(ROOT)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def demo_http_server() -> AsyncIterator[str]:
    """The demo server over Streamable HTTP, as a process; yields its MCP URL."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.mcp_demo_server", "http", str(port), cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}/mcp/"
    try:
        async with httpx.AsyncClient() as client:

            async def answers() -> bool:
                assert process.returncode is None, "the demo MCP server exited"
                with contextlib.suppress(httpx.HTTPError):
                    await client.get(f"http://127.0.0.1:{port}/")
                    return True
                return False

            await until(answers, "the demo MCP server answering")
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        await process.wait()


@pytest.fixture
async def demo_http() -> AsyncIterator[str]:
    async with demo_http_server() as url:
        yield url


async def gateway_key(channel: grpc.aio.Channel, user: str = "local") -> tuple[str, str]:
    """A gateway key for `user` (Gateway.CreateGatewayKey) and the URL to connect to."""
    stub = gateway_pb2_grpc.GatewayStub(channel)
    created = await stub.CreateGatewayKey(
        gateway_pb2.CreateGatewayKeyRequest(), metadata=(("x-instance-ai-user", user),)
    )
    return created.key, created.server_url


async def gateway_state(channel: grpc.aio.Channel, user: str = "local") -> Any:
    stub = gateway_pb2_grpc.GatewayStub(channel)
    return await stub.GetGateway(
        gateway_pb2.GetGatewayRequest(), metadata=(("x-instance-ai-user", user),)
    )


async def start_gateway(
    url: str, key: str, root: Path, *, write: bool = False
) -> asyncio.subprocess.Process:
    """`instance-ai gateway` as a person runs it (the key in its environment)."""
    return await asyncio.create_subprocess_exec(
        CLI,
        "gateway",
        "--server",
        url,
        "--root",
        str(root),
        *(["--write"] if write else []),
        env=os.environ | {"INSTANCE_AI_GATEWAY_KEY": key},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


@contextlib.asynccontextmanager
async def running_gateway(
    channel: grpc.aio.Channel, root: Path, *, write: bool = False, user: str = "local"
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`instance-ai gateway` sharing `root` for `user`, connected before this yields."""
    key, url = await gateway_key(channel, user)
    process = await start_gateway(url, key, root, write=write)
    try:
        for _ in range(1200):
            if (await gateway_state(channel, user)).connected:
                break
            if process.returncode is not None:
                stderr = await process.stderr.read() if process.stderr else b""
                raise AssertionError(f"the gateway exited: {stderr.decode()[-2000:]}")
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the gateway did not connect within 60 s")
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


async def connected(app: Application, name: str, *, within: float = 30) -> None:
    for _ in range(int(within / 0.05)):
        if any(s.name == name and s.state == "connected" for s in app.parts.mcp_servers.states()):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} did not connect: {app.parts.mcp_servers.states()}")
