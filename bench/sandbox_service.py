"""The sandbox service API (n8n's sandbox provider) through HTTP, each figure beside a baseline
measured in the same run, and n8n's own published figures as the peer to beat.

- create: a new sandbox from the warm pool (the API's `POST /sandboxes`) vs a cold create
  (pool off) through the same API; and create to its first command's exit (`true`) answered;
- reconnect: `POST /sandboxes {id}` of an existing sandbox vs `GET /sandboxes/{id}`;
- exec `true`: `POST .../executions` (the NDJSON stream to its exit) vs the engine's own exec
  of `true` (`docker exec`, or the sandbox's job launcher where runsc drives sandboxes);
- wake + exec `true` after an idle stop (a suspend, where the engine has snapshots) vs the
  engine's start after a plain stop + its exec;
- write and read 10 KB: `PUT /files` and `GET /files/content` vs the engine's exec of `cat`;
- list: `GET /files` of the workspace vs the engine's exec of `ls`.

n8n's figures (its `docs/performance.md`, Firecracker staging, p50): create 732 ms, exec
82 ms, wake + exec 240 ms.

    python -m bench.sandbox_service [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any

import httpx

from bench.sandbox import timed
from bench.server import bench_server
from bench.summary import record
from sandbox.engine import ContainerEngine, Snapshots
from sandbox.kinds import service_key

KEY = "bench-sandbox-api-key"
PAYLOAD = b"x" * 10 * 1024
# n8n's own service, Firecracker staging, p50 (n8n-sandbox-service docs/performance.md).
N8N_FIGURES = {"create": 732.0, "exec true": 82.0, "wake + exec true": 240.0}


def p(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def row(name: str, ours: list[float], base: list[float], baseline: str) -> str:
    o50, b50 = statistics.median(ours), statistics.median(base)
    peer = N8N_FIGURES.get(name)
    note = f"baseline: {baseline}" + (f"; n8n's service p50: {peer:.0f} ms" if peer else "")
    record("sandbox_service", name, o50, b50, "ms, p50", note=note)
    return (
        f"{name:<22} p50 {o50:>8.2f}  p95 {p(ours, 95):>8.2f}   baseline ({baseline}) p50 "
        f"{b50:>8.2f}  {b50 / o50:>6.2f}x" + (f"   n8n: {peer:.0f} ms" if peer else "")
    )


def engine_exec(engine: ContainerEngine, container: str, *argv: str) -> bytes:
    """A command through the engine itself (the baseline's way in), checked."""
    result = engine.exec(container, list(argv), workdir="/")
    if result.exit_code != 0:
        raise RuntimeError(f"{argv} exited {result.exit_code}: {result.stderr[-300:]!r}")
    return result.stdout


async def run(api: httpx.AsyncClient, sandbox: str, command: str) -> dict[str, Any]:
    answer = await api.post(f"/sandboxes/{sandbox}/executions", json={"command": command})
    answer.raise_for_status()
    last: dict[str, Any] = json.loads(answer.text.splitlines()[-1])
    if last.get("type") != "exit":
        raise RuntimeError(f"no exit event: {answer.text[-300:]}")
    return last


async def measure(rounds: int) -> list[str]:
    lines = []
    settings = {
        "sandbox_api_address": "127.0.0.1:0",
        "sandbox_api_keys": [KEY],
        "sandbox_api_pool_size": 2,
    }
    async with (
        bench_server(**settings) as (app, _channel),
        httpx.AsyncClient(base_url=app.sandbox_api_url or "", headers={"X-Api-Key": KEY}) as api,
    ):
        manager = app.parts.sandboxes.for_service(str(uuid.uuid4()))

        async def create(created: list[float], first_exec: list[float]) -> None:
            """A new sandbox, then its first command `true`: the time to each."""
            await manager.pool.fill()  # refilled between rounds: a pool member each time
            started = time.perf_counter()
            answer = await api.post("/sandboxes")
            answer.raise_for_status()
            created.append((time.perf_counter() - started) * 1000)
            await run(api, answer.json()["id"], "true")
            first_exec.append((time.perf_counter() - started) * 1000)
            # Removed, not left running: forty idle sandboxes would hold most of a core
            # (gVisor's systrap) under every figure measured after them.
            (await api.delete(f"/sandboxes/{answer.json()['id']}")).raise_for_status()

        pooled: list[float] = []
        pooled_exec: list[float] = []
        for _ in range(rounds):
            await create(pooled, pooled_exec)
        manager.pool.size = 0
        cold: list[float] = []
        cold_exec: list[float] = []
        for _ in range(rounds):
            await create(cold, cold_exec)
        lines.append(row("create", pooled, cold, "cold create, pool off"))
        lines.append(
            row("create to first exec answered", pooled_exec, cold_exec, "the same, pool off")
        )

        sandbox = (await api.post("/sandboxes")).json()["id"]
        await run(api, sandbox, "true")  # its worker and first exec warm
        reconnect = await timed(lambda: api.post("/sandboxes", json={"id": sandbox}), rounds)
        get = await timed(lambda: api.get(f"/sandboxes/{sandbox}"), rounds)
        lines.append(row("reconnect", reconnect, get, "GET /sandboxes/{id}"))

        engine = manager.engine
        info = await asyncio.to_thread(manager.provider.get, service_key(sandbox))
        assert info is not None, "the sandbox API's sandbox has no container"
        container = info.container_id
        way_in = "the job launcher's" if isinstance(engine, Snapshots) else "docker exec"
        ours = await timed(lambda: run(api, sandbox, "true"), rounds)
        base = await timed(
            lambda: asyncio.to_thread(engine_exec, engine, container, "true"), rounds
        )
        lines.append(row("exec true", ours, base, f"{way_in} true"))

        service = app.parts.service_sandboxes
        assert service is not None
        woken: list[float] = []
        started_again: list[float] = []
        for _ in range(max(3, rounds // 4)):
            await service.stop(sandbox)
            begun = time.perf_counter()
            await run(api, sandbox, "true")
            woken.append((time.perf_counter() - begun) * 1000)
            # A plain stop (the engine's kill: no snapshot to resume).
            await asyncio.to_thread(engine.kill, container)
            begun = time.perf_counter()
            await asyncio.to_thread(engine.start, container)
            await asyncio.to_thread(engine_exec, engine, container, "true")
            started_again.append((time.perf_counter() - begun) * 1000)
            await run(api, sandbox, "true")  # the service takes it up again
        lines.append(row("wake + exec true", woken, started_again, "start + exec (no snapshot)"))

        path = {"path": "/home/user/workspace/bench.txt"}
        files = f"/sandboxes/{sandbox}/files"
        ours = await timed(lambda: api.put(files, params=path, content=PAYLOAD), rounds)
        target = "/home/user/workspace/bench-engine.txt"
        script = f"printf '%s' '{PAYLOAD.decode()}' > {target}"
        base = await timed(
            lambda: asyncio.to_thread(engine_exec, engine, container, "sh", "-c", script),
            rounds,
        )
        lines.append(row("write 10 KB", ours, base, f"{way_in} sh -c 'printf > f'"))
        ours = await timed(lambda: api.get(f"{files}/content", params=path), rounds)
        base = await timed(
            lambda: asyncio.to_thread(engine_exec, engine, container, "cat", target), rounds
        )
        lines.append(row("read 10 KB", ours, base, f"{way_in} cat"))
        listing = {"path": "/home/user/workspace"}
        ours = await timed(lambda: api.get(files, params=listing), rounds)
        base = await timed(
            lambda: asyncio.to_thread(engine_exec, engine, container, "ls", "-la", listing["path"]),
            rounds,
        )
        lines.append(row("list", ours, base, f"{way_in} ls -la"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    for line in asyncio.run(measure(args.rounds)):
        print(line)


if __name__ == "__main__":
    main()
