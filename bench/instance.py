"""Instance benchmark: the n8n instance backend beside the embedded store, in the same run.

- build-and-save: a warm `Pipeline.BuildWorkflow` of a five-node workflow, saved into n8n
  (a REST create/update and the service's own records) vs saved into the embedded store;
- reads: `list-workflows` and `get-workflow` through `Tools.CallTool` on each backend, beside
  the floor: the same read straight from n8n's REST API (one HTTP round trip).

Starts its own n8n (`make n8n` installs it; a throwaway state directory), needs the engine and
the sandbox image. Everything it creates is removed at the end.

    python -m bench.instance [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx

from bench.build import FILE, build, prepare
from bench.server import bench_server
from bench.summary import record
from instance_ai.json_text import to_json
from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc, tools_pb2, tools_pb2_grpc
from instance_ai_cli import n8n_local


async def timed(call: Callable[[], Awaitable[Any]], rounds: int) -> float:
    """p50 milliseconds of `call`, after two warm-up calls."""
    for _ in range(2):
        await call()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def measure(channel: grpc.aio.Channel, rounds: int) -> dict[str, Any]:
    pipeline = pipeline_pb2_grpc.PipelineStub(channel)
    tools = tools_pb2_grpc.ToolsStub(channel)
    await prepare(tools, "bench-0")
    built = await pipeline.BuildWorkflow(
        pipeline_pb2.BuildWorkflowRequest(thread_id="bench-0", file_path=FILE)
    )

    async def call(name: str, **arguments: Any) -> None:
        await tools.CallTool(
            tools_pb2.CallToolRequest(
                thread_id="bench-0", tool_name=name, arguments_json=to_json(arguments)
            )
        )

    return {
        "workflow_id": built.workflow_id,
        "build": await timed(lambda: build(pipeline, "bench-0"), rounds),
        "list": await timed(lambda: call("list-workflows"), rounds),
        "get": await timed(lambda: call("get-workflow", workflowId=built.workflow_id), rounds),
    }


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as state:
        n8n = await asyncio.to_thread(n8n_local.start, n8n_local.install(), Path(state))
        try:
            async with bench_server() as (_app, channel):
                embedded = await measure(channel, rounds)
            async with bench_server(instance="n8n", n8n_url=n8n.url, n8n_api_key=n8n.api_key) as (
                _app,
                channel,
            ):
                remote = await measure(channel, rounds)
            async with httpx.AsyncClient(
                base_url=n8n.url + "/api/v1", headers={"X-N8N-API-KEY": n8n.api_key}
            ) as client:
                floor_get = await timed(
                    lambda: client.get(f"/workflows/{remote['workflow_id']}"), rounds
                )
                floor_list = await timed(lambda: client.get("/workflows"), rounds)
        finally:
            await asyncio.to_thread(n8n.stop)

    print(f"{'figure (ms, p50)':<52} {'ours':>9} {'baseline':>9} {'ratio':>8}")
    rows = [
        ("build-and-save: n8n vs embedded store", remote["build"], embedded["build"]),
        ("get-workflow on n8n vs n8n's REST GET (floor)", remote["get"], floor_get),
        ("list-workflows on n8n vs n8n's REST list (floor)", remote["list"], floor_list),
        ("get-workflow: n8n vs embedded store", remote["get"], embedded["get"]),
        ("list-workflows: n8n vs embedded store", remote["list"], embedded["list"]),
    ]
    for name, ours, base in rows:
        print(f"{name:<52} {ours:>9.2f} {base:>9.2f} {ours / base:>7.2f}x")
        record("instance", f"{name}, p50", ours, base, "ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.rounds))
