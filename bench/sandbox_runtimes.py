"""Sandbox runtimes benchmark: the sandbox figures under both OCI runtimes in one run, runc (the
host's kernel) beside runsc (gVisor), with the ratio runsc/runc per figure.

The two runtimes take turns round by round (each round's order alternated: these machines are
noisy), each under its own provider (`SandboxLimits(runtime=...)`):
- cold create: create + start + seed a new thread's sandbox, no pool;
- pool acquire: a claim from a filled warm pool;
- worker round trip: the in-sandbox worker's `ping`;
- build + verify, five nodes: `BuildWorkflow` then `VerifyWorkflow` of merge-code over gRPC,
  through a server started with `sandbox_runtime` set to each, warm;
- a ready sandbox's CPU time: what a pool sandbox's cgroup used from its creation until it was
  ready (worker running, compiler and engine loaded and warmed);
- a ready sandbox's memory: an idle ready pool sandbox's;
- the sandboxed browser's start: from nothing to a page Playwright can use, through the relay.

Needs the engine with both runtimes registered and the image (`make sandbox-image`). Everything
it creates carries a unique owner label and is removed at the end.

    python -m bench.sandbox_runtimes [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

import docker

from bench.sandbox import cleanup, container_mb, p50
from bench.server import bench_server, write_source
from bench.summary import record
from bench.verify import BUILD_THREAD, FILE, SOURCE, VERIFY_THREAD
from browser_relay.driver import Drivers
from browser_relay.headless import HeadlessBrowsers
from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSessions, sandbox_key
from instance_ai.json_text import from_json
from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc, tools_pb2_grpc
from sandbox.docker_engine import DockerEngine
from sandbox.engine import SandboxLimits
from sandbox.image.build import image_tags
from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider
from sandbox.runtimes import RUNC, RUNSC
from server.logs import configure_logging

RUNTIMES: Final = (RUNC, RUNSC)
# Each runtime's samples of one figure.
Samples = dict[str, list[float]]


def in_turn(round_: int) -> tuple[str, ...]:
    """The runtimes in a round's order: alternated, so neither always goes first."""
    return RUNTIMES if round_ % 2 == 0 else RUNTIMES[::-1]


def samples() -> Samples:
    return {runtime: [] for runtime in RUNTIMES}


async def once(action: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await action()
    return (time.perf_counter() - started) * 1000


def cpu_seconds(client: docker.DockerClient, container_id: str) -> float:
    """The CPU time a container's cgroup has used since it was created (its processes; under
    gVisor, its kernel in user space too)."""
    stats = client.api.stats(container_id, stream=False, one_shot=True)
    return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9


def row(name: str, figures: Samples, unit: str, note: str = "") -> str:
    """The figure's printed line (and its entry in the run's summary: runsc as ours, runc as
    the baseline)."""
    runc, runsc = p50(figures[RUNC]), p50(figures[RUNSC])
    ratio = runsc / runc
    recorded = f"runsc/runc {ratio:.2f}x; baseline: runc" + (f"; {note}" if note else "")
    record("sandbox-runtimes", name, runsc, runc, unit, note=recorded)
    return f"{name:<44} {runc:>10.2f} {runsc:>10.2f} {ratio:>9.2f}x  ({unit}" + (
        f"; {note})" if note else ")"
    )


async def ready_figures(
    pools: dict[str, SandboxManager], rounds: int, client: docker.DockerClient
) -> list[str]:
    """Each runtime's warm pool filled one sandbox at a time, the runtimes in turn, each
    sandbox's CPU time read as soon as it is ready; then the memory of them all, idle; then
    all claimed one by one (pool acquire: threads `<runtime>-warm-<n>`), and the first claimed
    one's worker pinged."""
    cpu, memory, acquire, ping = samples(), samples(), samples(), samples()
    for n in range(rounds):
        for runtime in in_turn(n):
            pool = pools[runtime]
            pool.pool.size += 1
            await pool.pool.fill()
            if pool.pool.count() < pool.pool.size:
                raise SystemExit(f"a {runtime} pool sandbox did not get ready (see the log)")
            ready = pool.pool.members[-1].container.id
            cpu[runtime].append(await asyncio.to_thread(cpu_seconds, client, ready))
    await asyncio.sleep(2)  # let the warm-ups' garbage go before sampling
    for runtime in RUNTIMES:
        for entry in pools[runtime].pool.members:
            mb = await asyncio.to_thread(container_mb, client, entry.container.id)
            memory[runtime].append(mb)
        pools[runtime].pool.size = 0  # measure claims alone, no refill competing for the CPU
    for n in range(rounds):
        for runtime in in_turn(n):
            claim = functools.partial(pools[runtime].acquire, f"{runtime}-warm-{n}")
            acquire[runtime].append(await once(claim))
    for n in range(rounds * 20):
        for runtime in in_turn(n):
            worker = pools[runtime].entries[f"{runtime}-warm-0"].worker
            assert worker is not None
            ping[runtime].append(
                await once(functools.partial(asyncio.to_thread, worker.call, "ping"))
            )
    return [
        row("pool acquire", acquire, "ms, p50"),
        row("worker round trip (ping)", ping, "ms, p50"),
        row("ready sandbox's CPU time, creation to ready", cpu, "CPU-s, p50"),
        row("ready sandbox's memory, idle", memory, "MB, p50"),
    ]


async def cold_creates(providers: dict[str, SandboxProvider], rounds: int) -> str:
    """Create + start + seed of a new thread's sandbox, no pool, no worker."""
    colds = {
        rt: SandboxManager(providers[rt], use_worker=False, adopt_pool=False) for rt in RUNTIMES
    }
    create = samples()
    try:
        for n in range(rounds):
            for runtime in in_turn(n):
                create_one = functools.partial(colds[runtime].acquire, f"{runtime}-cold-{n}")
                create[runtime].append(await once(create_one))
    finally:
        for cold in colds.values():
            await cold.close()
    return row("cold create (create + start + seed)", create, "ms, p50")


async def browser_starts(managers: dict[str, SandboxManager], rounds: int) -> str:
    """The sandboxed Chromium's start to a page Playwright can use, in each runtime's first
    claimed sandbox (as bench/sandbox_browser.py's "start"), after one untimed start each
    (Playwright started, Chromium's files read once)."""
    relay = await RelayServer(BrowserSessions()).start()
    headless, drivers = HeadlessBrowsers(relay), Drivers()
    starts = samples()
    try:
        for n in range(-1, rounds):
            for runtime in in_turn(n):
                thread = f"{runtime}-warm-0"
                started = time.perf_counter()
                session = await headless.ensure(
                    sandbox_key(thread), functools.partial(managers[runtime].open_browser, thread)
                )
                await drivers.driver(session.id, *relay.cdp_endpoint(session))
                elapsed = (time.perf_counter() - started) * 1000
                if n >= 0:
                    starts[runtime].append(elapsed)
                await drivers.drop(session.id)
                await headless.stop(sandbox_key(thread))
    finally:
        await drivers.close()
        await headless.close()
        await relay.close()
    return row("sandboxed browser's start", starts, "ms, p50")


async def build_and_verify(pipeline: pipeline_pb2_grpc.PipelineStub) -> float:
    """BuildWorkflow then VerifyWorkflow of the built workflow (from another thread, as
    bench/verify.py does), in milliseconds."""
    started = time.perf_counter()
    built = await pipeline.BuildWorkflow(
        pipeline_pb2.BuildWorkflowRequest(thread_id=BUILD_THREAD, file_path=FILE)
    )
    if not built.success:
        raise SystemExit(f"the benchmark build failed: {built.errors}")
    response = await pipeline.VerifyWorkflow(
        pipeline_pb2.VerifyWorkflowRequest(thread_id=VERIFY_THREAD, workflow_id=built.workflow_id)
    )
    elapsed = (time.perf_counter() - started) * 1000
    result = from_json(response.result_json)
    if not result["success"]:
        raise SystemExit(f"the benchmark verification failed: {result}")
    return elapsed


async def server_figures(rounds: int) -> str:
    """A five-node build and verification through a server per runtime (both up at once, so
    their rounds take turns), warm: after one untimed round."""
    both = samples()
    async with contextlib.AsyncExitStack() as stack:
        pipelines = {}
        for runtime in RUNTIMES:
            app, channel = await stack.enter_async_context(bench_server(sandbox_runtime=runtime))
            await write_source(
                tools_pb2_grpc.ToolsStub(channel), BUILD_THREAD, FILE, SOURCE.read_text()
            )
            await app.parts.events.append(VERIFY_THREAD, "bench-started")
            pipelines[runtime] = pipeline_pb2_grpc.PipelineStub(channel)
        for n in range(-1, rounds):
            for runtime in in_turn(n):
                elapsed = await build_and_verify(pipelines[runtime])
                if n >= 0:
                    both[runtime].append(elapsed)
    return row("build + verify, five nodes, warm", both, "ms, p50")


async def main(rounds: int) -> None:
    configure_logging(level="warning")
    engine = DockerEngine.connect()
    client = docker.from_env()
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    image = image_tags()[-1]
    providers = {
        runtime: SandboxProvider(
            engine, image=image, owner=owner, limits=SandboxLimits(runtime=runtime)
        )
        for runtime in RUNTIMES
    }
    # Not adopting: another runtime's pool members of the same owner would be discarded.
    pools = {rt: SandboxManager(providers[rt], adopt_pool=False) for rt in RUNTIMES}
    try:
        lines = await ready_figures(pools, rounds, client)
        lines.insert(0, await cold_creates(providers, rounds))
        lines.append(await browser_starts(pools, rounds))
        for pool in pools.values():
            await pool.close()
        lines.append(await server_figures(rounds))
    finally:
        for pool in pools.values():
            await pool.close()
        cleanup(engine, owner)
        client.close()
        engine.close()
    print(f"{'figure':<44} {'runc':>10} {'runsc':>10} {'runsc/runc':>10}")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.rounds))
