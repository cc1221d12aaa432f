"""Build benchmark: end-to-end `Pipeline.BuildWorkflow` over gRPC, warm, beside the one-shot
`node --import tsx build.mjs` run on the same file in the same sandbox, in the same run.

- latency: p50 / p90 of a warm build of a five-node workflow (compile, validate in every
  layer, save a version, two events) vs the one-shot build timed inside the container;
- throughput: builds per second with 10 threads building at once (each in its own sandbox)
  vs one thread building alone.

Needs the engine and the image (`make sandbox-image`). Everything it creates carries a unique
owner label and is removed at the end.

    python -m bench.build [--rounds N] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from bench.server import bench_server, time_in_sandbox, write_source
from bench.summary import record
from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc, tools_pb2_grpc
from server.app import Application

SOURCE = (
    Path(__file__).resolve().parents[1]
    / "sandbox/image/seed/knowledge-base/templates/order-router.workflow.ts"
)
FILE = "src/bench.workflow.ts"


async def build(stub: pipeline_pb2_grpc.PipelineStub, thread: str) -> float:
    started = time.perf_counter()
    response = await stub.BuildWorkflow(
        pipeline_pb2.BuildWorkflowRequest(thread_id=thread, file_path=FILE)
    )
    elapsed = (time.perf_counter() - started) * 1000
    if not response.success:
        raise SystemExit(f"the benchmark build failed: {response.errors}")
    return elapsed


async def prepare(tools: tools_pb2_grpc.ToolsStub, thread: str) -> None:
    await write_source(tools, thread, FILE, SOURCE.read_text())


async def one_shot_ms(app: Application, thread: str) -> float:
    """One `node --import tsx build.mjs` run, timed inside the container (no exec overhead)."""
    return await time_in_sandbox(
        app, thread, f"node --import tsx build.mjs {FILE} --tidy --out /tmp/one-shot.json"
    )


async def main(rounds: int, threads: int) -> None:
    async with bench_server() as (app, channel):
        pipeline = pipeline_pb2_grpc.PipelineStub(channel)
        tools = tools_pb2_grpc.ToolsStub(channel)
        await prepare(tools, "bench-0")
        for _ in range(3):  # sandbox, worker, compile thread and SDK warm
            await build(pipeline, "bench-0")
        warm = [await build(pipeline, "bench-0") for _ in range(rounds)]
        baseline = [await one_shot_ms(app, "bench-0") for _ in range(5)]

        alone_started = time.perf_counter()
        for _ in range(rounds):
            await build(pipeline, "bench-0")
        alone = rounds / (time.perf_counter() - alone_started)

        names = [f"bench-{n}" for n in range(threads)]
        await asyncio.gather(*(prepare(tools, name) for name in names))
        await asyncio.gather(*(build(pipeline, name) for name in names))

        async def builds_in(name: str) -> None:
            for _ in range(rounds):
                await build(pipeline, name)

        together_started = time.perf_counter()
        await asyncio.gather(*(builds_in(name) for name in names))
        together = threads * rounds / (time.perf_counter() - together_started)

    ours, base = statistics.median(warm), statistics.median(baseline)
    p90 = statistics.quantiles(warm, n=10)[-1]
    print(f"{'figure':<46} {'ours':>10} {'baseline':>10}")
    print(
        f"{'build, five nodes: BuildWorkflow vs build.mjs':<46} {ours:>10.2f} {base:>10.2f} "
        f"{base / ours:>8.1f}x faster  (ms, p50; ours p90 {p90:.2f})"
    )
    print(
        f"{f'builds/s: {threads} threads at once vs one alone':<46} {together:>10.1f} "
        f"{alone:>10.1f} {together / alone:>8.1f}x  (builds per second)"
    )
    record(
        "build",
        "five-node build, warm, p50",
        ours,
        base,
        "ms",
        note=f"p90 {p90:.1f} ms; baseline: one-shot build.mjs in the container",
    )
    record(
        "build",
        f"builds/s, {threads} threads at once",
        together,
        alone,
        "builds/s",
        lower_is_better=False,
        note="baseline: one thread alone",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.threads))
