"""Two replicas of the service on one PostgreSQL database and one Docker engine serve the
sandbox API as one: any replica answers for any sandbox, an execution running on one is
resumed, followed and killed through the other, and a replica's death loses no sandbox."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from sandbox.image.build import BuiltImage
from tests.postgres import new_postgres_database
from tests.sandbox_api_fixtures import STATIC_KEY, SandboxApiServer
from tests.sandbox_fixtures import remove_owned

KEY = {"X-Api-Key": STATIC_KEY}


@pytest.fixture
async def pair(
    postgres_url: str, tmp_path: Path, docker_client: docker.DockerClient, sandbox_image: BuiltImage
) -> AsyncIterator[list[SandboxApiServer]]:
    url = await new_postgres_database(postgres_url)
    owner = f"test-sbxapi-{uuid.uuid4().hex[:10]}"
    env = {
        "INSTANCE_AI_DATABASE_URL": url,
        "INSTANCE_AI_REPLICA_LEASE_SECONDS": "3",
        "INSTANCE_AI_SANDBOX_API_POOL_SIZE": "0",
    }
    servers = [
        SandboxApiServer(data_dir=tmp_path / "data", owner=owner, env=dict(env)) for _ in range(2)
    ]
    # Started together: they migrate the fresh database once, under its lock.
    await asyncio.gather(*(asyncio.to_thread(s.start) for s in servers))
    yield servers
    for server in servers:
        server.stop()
    remove_owned(docker_client, owner)


def events_of(body: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line.strip()]


@pytest.mark.timeout(300)
async def test_any_replica_serves_any_sandbox_and_its_executions(
    pair: list[SandboxApiServer],
) -> None:
    one_url, other_url = (s.url for s in pair)
    async with (
        httpx.AsyncClient(base_url=one_url, headers=KEY, timeout=60) as one,
        httpx.AsyncClient(base_url=other_url, headers=KEY, timeout=60) as other,
    ):
        sandbox = str(uuid.uuid4())
        assert (await one.post("/sandboxes", json={"id": sandbox})).status_code == 201
        assert (await other.post("/sandboxes", json={"id": sandbox})).status_code == 200
        files = f"/sandboxes/{sandbox}/files"
        path = {"path": "/home/user/workspace/shared.txt"}
        assert (await one.put(files, params=path, content=b"written on one")).status_code == 200
        read = await other.get(f"{files}/content", params=path)
        assert read.content == b"written on one"

        # An execution on one replica, its stream dropped after the first line...
        body = {
            "command": "for i in 1 2 3 4 5 6; do echo step$i; sleep 0.3; done",
            "exec_id": "across-replicas",
        }
        seen: list[dict[str, Any]] = []
        async with one.stream("POST", f"/sandboxes/{sandbox}/executions", json=body) as r:
            async for line in r.aiter_lines():
                seen.append(json.loads(line))
                if "step1" in line:
                    break
        # ...is followed to its end through the other.
        follow = {"after": seen[-1]["seq"], "follow": "true"}
        rest = await other.get(f"/sandboxes/{sandbox}/executions/across-replicas", params=follow)
        assert rest.status_code == 200, rest.text
        events = seen + events_of(rest.text)
        assert [e["seq"] for e in events] == list(range(len(events)))
        output = "".join(e.get("data", "") for e in events if e["type"] == "stdout")
        assert output == "".join(f"step{i}\n" for i in range(1, 7))
        assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 0
        # Posting the same exec_id to the other replica follows it; it does not run again.
        again = await other.post(f"/sandboxes/{sandbox}/executions", json=body)
        assert events_of(again.text) == events
        # A snapshot without follow, and an unknown execution.
        snapshot = await other.get(f"/sandboxes/{sandbox}/executions/across-replicas")
        assert events_of(snapshot.text) == events
        unknown = await other.get(f"/sandboxes/{sandbox}/executions/nope")
        assert unknown.status_code == 404

        # Killed through the other replica while it runs on the first.
        long_one = {"command": "echo started; sleep 91", "exec_id": "killed-elsewhere"}
        async with one.stream("POST", f"/sandboxes/{sandbox}/executions", json=long_one) as r:
            lines = r.aiter_lines()
            async for line in lines:
                if "started\\n" in line:
                    break
            kill = await other.delete(f"/sandboxes/{sandbox}/executions/killed-elsewhere")
            assert kill.status_code == 204
            last = [json.loads(line) async for line in lines][-1]
        assert last["type"] == "exit" and last["killed"] is True
        left = await other.post(
            f"/sandboxes/{sandbox}/executions",
            json={"command": "ps -eo args | grep -c '[s]leep 91' || true"},
        )
        assert "".join(e.get("data", "") for e in events_of(left.text)).strip() == "0"

        # One replica dies: the other still has the sandbox and its files.
        pair[0].stop(signal.SIGKILL)
        read = await other.get(f"{files}/content", params=path)
        assert read.content == b"written on one"
        assert (await other.delete(f"/sandboxes/{sandbox}")).status_code == 204
        assert (await other.get(f"/sandboxes/{sandbox}")).status_code == 404
