"""Scale of one host: many threads building and verifying at once, each a fresh thread with
its own sandbox (write the source, `BuildWorkflow`, `VerifyWorkflow`), beside one such case
alone in the same run.

Reports whether every case succeeded, cases per second, case latency p50 / p99, the peak
memory the run added on this machine (sampled), and the sandboxes alive at the end. The server
runs in this process with the default warm pool; everything it made carries a throw-away
owner label and is removed at the end.

    python -m bench.scale [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import docker

from bench.events import percentile
from bench.server import bench_server, write_source
from bench.summary import record
from instance_ai.json_text import from_json
from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc, tools_pb2_grpc
from sandbox.identity import LABEL_OWNER
from server.app import Application

SOURCE = Path(__file__).resolve().parents[1] / "tests/workflows/merge-code.workflow.ts"
FILE = "src/case.workflow.ts"
POOL_SIZE = 2  # the service's default


def used_mb() -> float:
    """The machine's memory in use (MemTotal less MemAvailable), in MB."""
    info = dict(
        line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line
    )
    kib = int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])
    return kib / 1024


async def one_case(
    tools: tools_pb2_grpc.ToolsStub, pipeline: pipeline_pb2_grpc.PipelineStub, thread: str
) -> float:
    """Seconds for a fresh thread to write, build and verify the source; raises on failure."""
    started = time.perf_counter()
    await write_source(tools, thread, FILE, SOURCE.read_text())
    built = await pipeline.BuildWorkflow(
        pipeline_pb2.BuildWorkflowRequest(thread_id=thread, file_path=FILE)
    )
    if not built.success:
        raise RuntimeError(f"{thread}: the build failed: {list(built.errors)}")
    verified = await pipeline.VerifyWorkflow(
        pipeline_pb2.VerifyWorkflowRequest(thread_id=thread, workflow_id=built.workflow_id)
    )
    result = from_json(verified.result_json)
    if not result.get("success"):
        raise RuntimeError(f"{thread}: the verification failed: {result.get('status')}")
    return time.perf_counter() - started


async def sample_peak(stop: asyncio.Event, peak: list[float]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], used_mb())
        await asyncio.sleep(0.25)


def alive_sandboxes(app: Application) -> int:
    """Running sandboxes of this server's owner (the threads' and the pool's)."""
    owner = app.settings.sandbox_owner
    client = docker.from_env()
    try:
        return len(client.containers.list(filters={"label": f"{LABEL_OWNER}={owner}"}))
    finally:
        client.close()


async def main(threads: int) -> None:
    async with bench_server(sandbox_pool_size=POOL_SIZE) as (app, channel):
        tools = tools_pb2_grpc.ToolsStub(channel)
        pipeline = pipeline_pb2_grpc.PipelineStub(channel)
        await one_case(tools, pipeline, "warm-up")  # the image's first start, not measured
        alone = [await one_case(tools, pipeline, f"alone-{n}") for n in range(3)]
        await asyncio.sleep(15)  # the pool refills, as it would between bursts
        before = used_mb()
        peak = [before]
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_peak(stop, peak))
        started = time.perf_counter()
        outcomes = await asyncio.gather(
            *(one_case(tools, pipeline, f"case-{n}") for n in range(threads)),
            return_exceptions=True,
        )
        wall = time.perf_counter() - started
        stop.set()
        await sampler
        alive = alive_sandboxes(app)
    durations = [o for o in outcomes if isinstance(o, float)]
    failures = [o for o in outcomes if not isinstance(o, float)]
    alone_p50 = statistics.median(alone)
    rate, p50, p99 = threads / wall, percentile(durations, 50), percentile(durations, 99)
    added_mb = peak[0] - before
    print(f"{threads} threads at once, each a fresh thread and sandbox (write, build, verify)")
    print(f"  succeeded           {len(durations)}/{threads}")
    for failure in failures[:5]:
        print(f"    {failure}")
    print(f"  cases/s             {rate:8.2f}   (one alone: {1 / alone_p50:.2f})")
    print(f"  case p50 / p99      {p50:8.2f} / {p99:.2f} s   (one alone: {alone_p50:.2f} s)")
    print(f"  peak memory added   {added_mb:8.0f} MB   ({added_mb / threads:.0f} MB a case)")
    print(f"  sandboxes alive     {alive:8d}   (threads' own, kept for their next call; the pool)")
    note = f"{len(durations)}/{threads} succeeded"
    record(
        "scale",
        f"{threads} threads at once: cases/s",
        rate,
        1 / alone_p50,
        "cases/s",
        lower_is_better=False,
        note=f"{note}; baseline: one case alone",
    )
    record(
        "scale",
        f"{threads} threads at once: case p50",
        p50,
        alone_p50,
        "s",
        note=f"p99 {p99:.2f} s; baseline: one case alone",
    )
    record(
        "scale",
        f"{threads} threads at once: peak memory added",
        added_mb,
        None,
        "MB",
        note=f"{alive} sandboxes alive at the end",
    )
    if failures:
        raise SystemExit(f"{len(failures)} of {threads} cases failed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=50)
    asyncio.run(main(parser.parse_args().threads))
