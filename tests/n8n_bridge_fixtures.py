"""`instance-ai n8n-bridge` for the tests, started as a person starts it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from instance_ai_cli import n8n_local

# A two-node workflow both assistants build: a manual trigger into a Set node.
# How long a bridge may take to answer its health check once started.
START_DEADLINE_S = 120.0

START = {
    "id": "n1",
    "name": "Start",
    "type": "n8n-nodes-base.manualTrigger",
    "typeVersion": 1,
    "position": [0, 0],
    "parameters": {},
}
SHAPE = {
    "id": "n2",
    "name": "Shape",
    "type": "n8n-nodes-base.set",
    "typeVersion": 3.4,
    "position": [220, 0],
    "parameters": {"mode": "manual", "assignments": {"assignments": []}},
}


def order_intake(name: str = "Order intake") -> str:
    """That workflow as the JSON source file our build-workflow reads."""
    connections = {"Start": {"main": [[{"node": "Shape", "type": "main", "index": 0}]]}}
    return json.dumps({"name": name, "nodes": [START, SHAPE], "connections": connections})


__all__ = ["SHAPE", "START", "bridge", "order_intake"]


@asynccontextmanager
async def bridge(n8n_url: str, server_port: int) -> AsyncIterator[str]:
    """`instance-ai n8n-bridge` as a person starts it, in front of `n8n_url`."""
    port = n8n_local.free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "instance-ai"),
            "n8n-bridge",
            "--n8n-url",
            n8n_url,
            "--listen",
            f"127.0.0.1:{port}",
            "--server",
            f"127.0.0.1:{server_port}",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        # A generous deadline: a process's start is seconds of CPU, and on a busy machine more.
        deadline = time.monotonic() + START_DEADLINE_S
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                assert process.poll() is None, "the bridge exited"
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{url}/healthz")).status_code == 200:
                        break
                assert time.monotonic() < deadline, f"the bridge never answered at {url}"
                await asyncio.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
