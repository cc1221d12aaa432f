"""Event log benchmark: publish→receive latency over gRPC and append throughput, each printed
beside a bare SQLite insert loop (one insert and commit per event, same durability settings)
measured in the same run. Machines here are noisy: read the ratios, not the absolute figures.

    python -m bench.events [--events N] [--threads T]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import grpc

from bench.summary import record
from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from server.app import Application
from server.logs import configure_logging
from server.settings import load_settings


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def bare_sqlite(path: Path, events: int) -> tuple[list[float], float]:
    """Per-insert latencies (seconds) and inserts/s of a plain insert+commit loop."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE events (thread_id TEXT, id INTEGER, type TEXT, payload TEXT)")
    latencies = []
    start = time.perf_counter()
    for n in range(events):
        t0 = time.perf_counter()
        conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?)", ("t", n + 1, "tick", f'{{"n": {n}}}')
        )
        conn.commit()
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    conn.close()
    return latencies, events / elapsed


async def publish_to_receive(app: Application, events: int) -> list[float]:
    """Append one event at a time; time until a gRPC follower on loopback receives it."""
    log = app.parts.events
    await log.append("latency", "warm-up")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        call = agent_pb2_grpc.AgentStub(channel).StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id="latency", follow=True)
        )
        stream = aiter(call)
        await anext(stream)
        latencies = []
        for n in range(events):
            t0 = time.perf_counter()
            await log.append("latency", "tick", {"n": n})
            await anext(stream)
            latencies.append(time.perf_counter() - t0)
        call.cancel()
    return latencies


async def throughput(app: Application, events: int, threads: int, concurrency: int) -> float:
    """Appends/s with `concurrency` appenders spread over `threads` threads."""
    log = app.parts.events
    per_worker = events // concurrency

    async def worker(w: int) -> None:
        thread_id = f"tp-{threads}-{w % threads}"
        for n in range(per_worker):
            await log.append(thread_id, "tick", {"n": n})

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return per_worker * concurrency / (time.perf_counter() - start)


def row(name: str, ours: float, base: float, unit: str, higher_is_better: bool) -> str:
    ratio = ours / base if base else float("nan")
    better = "higher is better" if higher_is_better else "lower is better"
    return f"{name:<34} {ours:>12.2f} {base:>12.2f} {ratio:>8.2f}x  {unit}, {better}"


async def main(events: int, threads: int, concurrency: int) -> None:
    configure_logging(level="warning")
    with tempfile.TemporaryDirectory() as tmp:
        base_latencies, base_rate = bare_sqlite(Path(tmp) / "bare.db", events)
        settings = load_settings(port=0, data_dir=Path(tmp) / "data", sandbox_provider="none")
        async with Application(settings) as app:
            latencies = await publish_to_receive(app, events)
            one_thread = await throughput(app, events, 1, concurrency)
            many_threads = await throughput(app, events, threads, concurrency)

    ms = 1000.0
    print(f"events={events} concurrency={concurrency}; baseline: bare SQLite insert+commit loop")
    print(f"{'metric':<34} {'instance-ai':>12} {'baseline':>12} {'ratio':>9}")
    print(
        row(
            "publish->receive p50 (gRPC)",
            percentile(latencies, 50) * ms,
            percentile(base_latencies, 50) * ms,
            "ms",
            False,
        )
    )
    print(
        row(
            "publish->receive p99 (gRPC)",
            percentile(latencies, 99) * ms,
            percentile(base_latencies, 99) * ms,
            "ms",
            False,
        )
    )
    print(row("appends/s, 1 thread", one_thread, base_rate, "events/s", True))
    print(row(f"appends/s, {threads} threads", many_threads, base_rate, "events/s", True))
    baseline = "bare SQLite insert + commit"
    for percent in (50, 99):
        record(
            "events",
            f"publish → receive over gRPC, p{percent}",
            percentile(latencies, percent) * ms,
            percentile(base_latencies, percent) * ms,
            "ms",
            note=baseline,
        )
    record(
        "events",
        "appends/s, 1 thread",
        one_thread,
        base_rate,
        "events/s",
        lower_is_better=False,
        note=baseline,
    )
    record(
        "events",
        f"appends/s, {threads} threads",
        many_threads,
        base_rate,
        "events/s",
        lower_is_better=False,
        note=baseline,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.threads, args.concurrency))
