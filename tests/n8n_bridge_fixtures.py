"""`instance-ai n8n-bridge` for the tests, started as a person starts it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from instance_ai_cli import n8n_local
from tests.waiting import until

# A two-node workflow both assistants build: a manual trigger into a Set node.
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
        async with httpx.AsyncClient(timeout=5) as client:

            async def healthy() -> bool:
                assert process.poll() is None, "the bridge exited"
                with contextlib.suppress(httpx.TransportError):
                    return (await client.get(f"{url}/healthz")).status_code == 200
                return False

            await until(healthy, f"the bridge answering at {url}", every_s=0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
