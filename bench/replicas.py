"""Replicas benchmark: the bundled source cases (build + verify, a fresh thread each) spread
over 1, 2 and 3 `instance-ai serve` replicas on one throwaway PostgreSQL cluster, each beside
the one-replica run measured in the same invocation; and publish → receive latency of the
event log within one replica and across two, beside one process on SQLite.

All replicas run on this machine, so its cores cap the throughput: the table says where the
CPU went (the replicas, the runner, and the rest: sandboxes' Node workers, dockerd and
PostgreSQL). Everything made is removed at the end.

    python -m bench.replicas [--replicas 1,2,3] [--concurrency 4] [--events 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from bench.eval import Figures, run_level, start_server
from bench.events import percentile
from bench.sandbox import cleanup
from bench.summary import record
from sandbox.docker_engine import DockerEngine
from server.logs import configure_logging
from server.runtime.events import Event, EventLog
from server.runtime.replicas import open_replica
from server.store import Database
from tests.postgres import new_postgres_database, postgres_cluster


async def throughput(cluster: str, replicas: int, concurrency: int, owner: str) -> Figures:
    url = await new_postgres_database(cluster)
    env = {"INSTANCE_AI_DATABASE_URL": url}
    with tempfile.TemporaryDirectory() as scratch:
        started = [
            await asyncio.to_thread(start_server, Path(scratch) / "data", owner, env)
            for _ in range(replicas)
        ]
        pids = [process.pid for process, _ in started]
        addresses = [address for _, address in started]
        try:
            await run_level(addresses, pids, 1, Path(scratch) / "warm", limit=replicas)
            return await run_level(addresses, pids, concurrency, Path(scratch) / "runs")
        finally:
            for process, _ in started:
                process.terminate()
                process.wait()


@contextlib.asynccontextmanager
async def event_log(url: str, shared: bool) -> AsyncIterator[EventLog]:
    db = await Database.open(url)
    if shared:
        replicas, log = await open_replica(db, url=url, lease_s=10)
    else:
        log = EventLog(db=db)
        log.start()
    try:
        yield log
    finally:
        if shared:
            await replicas.close()
        await log.close()
        await db.close()


async def latencies(writer: EventLog, reader: EventLog, events: int) -> list[float]:
    """Append one event at a time on `writer`; seconds until `reader`'s follower has it."""
    thread = f"latency-{uuid.uuid4().hex[:6]}"
    await writer.append(thread, "warm-up")
    arrived: asyncio.Queue[Event] = asyncio.Queue()

    async def follow() -> None:
        async with contextlib.aclosing(reader.subscribe(thread, follow=True)) as stream:
            async for event in stream:
                arrived.put_nowait(event)

    follower = asyncio.create_task(follow())
    await arrived.get()
    samples = []
    for n in range(events):
        started = time.perf_counter()
        await writer.append(thread, "tick", {"n": n})
        await arrived.get()
        samples.append(time.perf_counter() - started)
    follower.cancel()
    await asyncio.gather(follower, return_exceptions=True)
    return samples


async def latency_rows(cluster: str, events: int) -> list[tuple[str, list[float]]]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        sqlite = f"sqlite+aiosqlite:///{Path(scratch) / 'events.db'}"
        async with event_log(sqlite, shared=False) as alone:
            rows.append(("one process, SQLite (baseline)", await latencies(alone, alone, events)))
    url = await new_postgres_database(cluster)
    async with event_log(url, shared=True) as a, event_log(url, shared=True) as b:
        rows.append(("PostgreSQL, within one replica", await latencies(a, a, events)))
        rows.append(("PostgreSQL, across two replicas", await latencies(a, b, events)))
    return rows


async def main(levels: list[int], concurrency: int, events: int) -> None:
    configure_logging(level="WARNING")
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    engine = DockerEngine.connect()
    with postgres_cluster() as cluster:
        try:
            figures = [await throughput(cluster, n, concurrency, owner) for n in levels]
        finally:
            cleanup(engine, owner)
            engine.close()
        latency = await latency_rows(cluster, events)
    base = figures[0]
    print(
        f"bundled source cases over replicas on one PostgreSQL, concurrency {concurrency}, "
        f"{os.cpu_count()} cores; baseline: {levels[0]} replica(s) in the same run"
    )
    print(
        f"{'replicas':>8} {'wall s':>7} {'cases/s':>8} {'vs base':>8} {'passed':>7} "
        f"{'busy cores':>10} {'replicas cpu s':>14} {'runner cpu s':>12} {'rest cpu s':>10}"
    )
    for n, f in zip(levels, figures, strict=True):
        print(
            f"{n:>8} {f.wall:>7.1f} {f.total / f.wall:>8.2f} {base.wall / f.wall:>7.2f}x "
            f"{f.passed:>3}/{f.total:<3} {f.busy_cores:>10.2f} {f.server_cpu:>14.1f} "
            f"{f.runner_cpu:>12.1f} {f.other_cpu:>10.1f}"
        )
        record(
            "replicas",
            f"cases/s with {n} replica(s) on one PostgreSQL",
            f.total / f.wall,
            base.total / base.wall,
            "cases/s",
            lower_is_better=False,
            note=f"{f.passed}/{f.total} passed; baseline: {levels[0]} replica(s)",
        )
    print(f"\npublish → receive, {events} events one at a time (ms)")
    baseline = percentile(latency[0][1], 50)
    for name, samples in latency:
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        print(
            f"  {name:<34} p50 {p50 * 1e3:6.2f}  p99 {p99 * 1e3:6.2f}  "
            f"({p50 / baseline:.1f}x the baseline's p50)"
        )
        record(
            "replicas",
            f"publish → receive, {name}, p50",
            p50 * 1e3,
            baseline * 1e3,
            "ms",
            note=f"p99 {p99 * 1e3:.2f} ms; baseline: {latency[0][0]}",
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--events", type=int, default=300)
    arguments = parser.parse_args()
    asyncio.run(
        main(
            [int(v) for v in arguments.replicas.split(",")],
            arguments.concurrency,
            arguments.events,
        )
    )
