"""Verify benchmark: end-to-end `Pipeline.VerifyWorkflow` over gRPC for a five-node workflow,
warm, beside a one-shot Node process running the same workflow on the same engine in the same
sandbox (timed inside the container), in the same run.

Needs the engine and the image (`make sandbox-image`). Everything it creates carries a unique
owner label and is removed at the end.

    python -m bench.verify [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from bench.server import bench_server, time_in_sandbox, write_source
from bench.summary import record
from instance_ai.json_text import from_json
from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc, tools_pb2_grpc
from server.app import Application

SOURCE = Path(__file__).resolve().parents[1] / "tests/workflows/merge-code.workflow.ts"
FILE = "src/bench.workflow.ts"
# Built in one thread, verified from another: verifications there belong to no work item, so
# the loop's budget of five attempts does not end the benchmark.
BUILD_THREAD, VERIFY_THREAD = "bench-build", "bench-verify"


async def verify(stub: pipeline_pb2_grpc.PipelineStub, workflow_id: str) -> float:
    started = time.perf_counter()
    response = await stub.VerifyWorkflow(
        pipeline_pb2.VerifyWorkflowRequest(thread_id=VERIFY_THREAD, workflow_id=workflow_id)
    )
    elapsed = (time.perf_counter() - started) * 1000
    result = from_json(response.result_json)
    if not result["success"]:
        raise SystemExit(f"the benchmark verification failed: {result}")
    return elapsed


async def one_shot_ms(app: Application, workflow: dict[str, object]) -> float:
    """`node run-op.mjs` running the same workflow once: engine load plus run."""
    manager = await app.parts.sandboxes.for_thread(VERIFY_THREAD)
    request = {"op": "execute", "executionId": "one-shot", "workflow": workflow, "timeoutMs": 60000}
    await manager.write_file(VERIFY_THREAD, "one-shot.json", json.dumps(request).encode())
    return await time_in_sandbox(
        app, VERIFY_THREAD, 'node /opt/app/bin/run-op.mjs "$(cat one-shot.json)"'
    )


async def main(rounds: int) -> None:
    async with bench_server() as (app, channel):
        tools = tools_pb2_grpc.ToolsStub(channel)
        pipeline = pipeline_pb2_grpc.PipelineStub(channel)
        await write_source(tools, BUILD_THREAD, FILE, SOURCE.read_text())
        built = await pipeline.BuildWorkflow(
            pipeline_pb2.BuildWorkflowRequest(thread_id=BUILD_THREAD, file_path=FILE)
        )
        await app.parts.events.append(VERIFY_THREAD, "bench-started")
        for _ in range(3):  # sandbox, worker, engine warm
            await verify(pipeline, built.workflow_id)
        warm = [await verify(pipeline, built.workflow_id) for _ in range(rounds)]
        workflow = (await app.parts.instance.workflows.require(built.workflow_id)).as_json()
        baseline = [await one_shot_ms(app, workflow) for _ in range(5)]
    ours, base = statistics.median(warm), statistics.median(baseline)
    p90 = statistics.quantiles(warm, n=10)[-1]
    print(f"{'figure':<52} {'ours':>10} {'baseline':>10}")
    print(
        f"{'verify, five nodes: VerifyWorkflow vs one-shot node':<52} {ours:>10.2f} "
        f"{base:>10.2f} {base / ours:>8.1f}x faster  (ms, p50; ours p90 {p90:.2f})"
    )
    record(
        "verify",
        "five-node verification, warm, p50",
        ours,
        base,
        "ms",
        note=f"p90 {p90:.1f} ms; baseline: one-shot node run in the container",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.rounds))
