"""Sandbox benchmark: each figure beside its naive baseline, measured in the same run.

- acquire a sandbox for a new thread: from the warm pool vs cold create + start + seed;
- worker ping vs `docker exec true`; 10 KB write and read through the worker vs the archive
  upload / `docker exec cat` path; a warm compile vs the same compile in a one-shot
  `run-op.mjs` process (bench/build.py compares a whole build with `build.mjs`);
- 20 threads acquiring at once: warm pool vs cold;
- (an idle ready sandbox's memory, by readiness, is bench/ready.py's;)
- the worker's memory after 1,000 builds of a source edited before each vs after 100 (flat
  is 1.0; the worker recycles its threads past a bound).

Needs the engine and the image (`make sandbox-image`). Everything it creates carries a unique
owner label and is removed at the end.

    python -m bench.sandbox [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import docker

from bench.summary import record
from sandbox import files
from sandbox.docker_engine import DockerEngine
from sandbox.engine import ContainerEngine
from sandbox.image.build import BIN_DIR, image_tags
from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider, remove_owner
from server.logs import configure_logging

PAYLOAD = b"x" * 10 * 1024


async def timed(action: Callable[[], Awaitable[object]], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def row(name: str, ours: float, base: float, unit: str = "ms, p50") -> str:
    """The figure's printed line (and its entry in the run's summary)."""
    record("sandbox", name, ours, base, unit)
    return f"{name:<40} {ours:>10.2f} {base:>10.2f} {base / ours:>8.1f}x faster  ({unit})"


async def acquire_figures(provider: SandboxProvider, rounds: int) -> tuple[float, float]:
    warm = SandboxManager(provider, pool_size=rounds)
    await warm.pool.fill()
    warm.pool.size = 0  # measure claims alone, no refill competing for the CPU
    names = iter(range(10**6))
    pooled = await timed(lambda: warm.acquire(f"warm-{next(names)}"), rounds)
    cold = SandboxManager(provider, use_worker=False)
    unpooled = await timed(lambda: cold.acquire(f"cold-{next(names)}"), rounds)
    await warm.close()
    return p50(pooled), p50(unpooled)


async def io_figures(provider: SandboxProvider, rounds: int) -> list[str]:
    manager = SandboxManager(provider)
    container = await manager.acquire("io")
    await manager.write_file("io", "warm-up.txt", b"x")  # starts the worker
    entry = manager.entries["io"]
    worker = entry.worker
    assert worker is not None

    async def in_thread(function: Callable[[], object]) -> object:
        return await asyncio.to_thread(function)

    ping = await timed(lambda: in_thread(lambda: worker.call("ping")), rounds)
    engine = manager.engine
    exec_true = await timed(
        lambda: in_thread(lambda: engine.exec(container.id, ["true"], workdir="/")), rounds
    )
    workspace = files.Workspace(engine, container.id)
    write_w = await timed(lambda: manager.write_file("io", "w.bin", PAYLOAD), rounds)
    write_a = await timed(
        lambda: in_thread(lambda: files.write_file(workspace, "a.bin", PAYLOAD)), rounds
    )
    read_w = await timed(lambda: manager.read_file("io", "w.bin"), rounds)
    read_e = await timed(lambda: in_thread(lambda: files.read_file(workspace, "a.bin")), rounds)
    template = "knowledge-base/templates/order-router.workflow.ts"
    await manager.toolchain("io").compile(template)  # loads the SDK in the compile thread once
    compile_w = await timed(lambda: manager.toolchain("io").compile(template), rounds)
    one_shot = SandboxManager(provider, use_worker=False)
    compile_e = await timed(lambda: one_shot.toolchain("io").compile(template), 3)
    await manager.close()
    return [
        row("compile: worker vs one-shot run-op.mjs", p50(compile_w), p50(compile_e)),
        row("worker ping vs docker exec true", p50(ping), p50(exec_true)),
        row("10 KB write: worker vs put_archive", p50(write_w), p50(write_a)),
        row("10 KB read: worker vs exec cat", p50(read_w), p50(read_e)),
    ]


async def burst_figures(provider: SandboxProvider, threads: int) -> tuple[float, float]:
    warm = SandboxManager(provider, pool_size=threads)
    await warm.pool.fill()
    warm.pool.size = 0
    started = time.perf_counter()
    await asyncio.gather(*(warm.acquire(f"burst-warm-{n}") for n in range(threads)))
    pooled = (time.perf_counter() - started) * 1000
    cold = SandboxManager(provider, use_worker=False)
    started = time.perf_counter()
    await asyncio.gather(*(cold.acquire(f"burst-cold-{n}") for n in range(threads)))
    unpooled = (time.perf_counter() - started) * 1000
    await warm.close()
    return pooled, unpooled


async def worker_growth(provider: SandboxProvider, builds: int) -> str:
    """The worker's RSS after `builds` builds vs after the first 100 (each of an edited
    source, as an agent's edits make them)."""
    manager = SandboxManager(provider)
    template = (BIN_DIR / "warm.workflow.ts").read_text()
    rss: dict[int, float] = {}
    try:
        for n in range(1, builds + 1):
            edited = template.replace("Warm-up", f"Edit {n}").encode()
            await manager.write_file("growth", "src/a.workflow.ts", edited)
            if not (await manager.toolchain("growth").compile("src/a.workflow.ts")).ok:
                raise SystemExit("a build of the growth benchmark failed")
            if n in (100, builds):
                stats = await manager.operation("growth", "stats")
                rss[n] = stats["memory"]["rss"] / 2**20
                recycled = stats["recycled"]
    finally:
        await manager.close()
    name = f"worker memory: {builds} builds vs 100"
    record(
        "sandbox",
        name,
        rss[builds],
        rss[100],
        "MB RSS",
        note=f"flat is 1.00x; threads recycled {recycled} times",
    )
    return (
        f"{name:<40} {rss[builds]:>10.1f} {rss[100]:>10.1f}   (MB RSS; "
        f"{rss[builds] / rss[100]:.2f}x; threads recycled {recycled} times)"
    )


def container_mb(client: docker.DockerClient, container_id: str) -> float:
    """A container's memory in use (its cgroup's, less the page cache it can drop)."""
    memory = client.api.stats(container_id, stream=False)["memory_stats"]
    dropable = memory.get("stats", {}).get("inactive_file", 0)
    return float(memory["usage"] - dropable) / 2**20


def cleanup(engine: ContainerEngine, owner: str) -> None:
    remove_owner(engine, owner)


async def main(rounds: int, burst: int) -> None:
    configure_logging(level="warning")
    engine = DockerEngine.connect()
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    provider = SandboxProvider(engine, image=image_tags()[-1], owner=owner)
    try:
        pooled, cold = await acquire_figures(provider, rounds)
        lines = [row("acquire: warm pool vs cold create+start", pooled, cold)]
        lines += await io_figures(provider, rounds * 3)
        burst_pooled, burst_cold = await burst_figures(provider, burst)
        lines.append(
            row(f"{burst} threads at once: pool vs cold", burst_pooled, burst_cold, "ms wall")
        )
        lines.append(await worker_growth(provider, 1000))
    finally:
        cleanup(engine, owner)
        engine.close()
    print(f"{'figure':<40} {'ours':>10} {'baseline':>10}")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--burst", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.burst))
