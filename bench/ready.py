"""Ready-sandbox benchmark: what it costs to make a thread's sandbox ready, ours beside the way
it was made before (the baseline), in the same run, turn about.

- **ours**: the threads load their modules from one bundle each (bin/bundles) with Node's
  compile cache shipped in the image; a pool member is warmed to build (compile thread only)
  or to build and verify (the engine thread too).
- **baseline**: the same image with `INSTANCE_AI_SANDBOX_BUNDLES=off` and no compile cache,
  i.e. modules read file by file from node_modules, as before issue 38.

Figures, p50 over `--rounds` sandboxes each:
- CPU-seconds from the container's creation until it is ready to build, and ready to build and
  verify (its cgroup's counter: its processes, and under gVisor its kernel in user space);
- the memory of an idle sandbox ready to build, ready to verify, and after its first
  verification of a five-node workflow (its cgroup's, less the page cache it can drop);
- a bare started container's CPU time and memory, the floor under both.

Needs the engine and the image (`make sandbox-image`). Everything it creates carries a unique
owner label and is removed at the end.

    python -m bench.ready [--rounds N] [--runtime auto|runc|runsc]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import uuid

import docker

from bench.sandbox import container_mb, p50
from bench.sandbox_runtimes import cpu_seconds
from bench.summary import record
from bench.verify import SOURCE
from sandbox.docker_engine import DockerEngine
from sandbox.engine import ContainerInfo, SandboxLimits
from sandbox.image.build import image_tags
from sandbox.kinds import THREAD
from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider, remove_owner
from sandbox.readiness import Readiness
from sandbox.runtimes import RuntimeSetting, choose_runtime
from server.logs import configure_logging

WAYS = ("ours", "baseline")
# The baseline's sandboxes: the image's modules read file by file, no compile cache.
UNBUNDLED = dataclasses.replace(
    THREAD, environment={"INSTANCE_AI_SANDBOX_BUNDLES": "off", "NODE_COMPILE_CACHE": ""}
)


@dataclasses.dataclass
class Figures:
    cpu: dict[Readiness, list[float]] = dataclasses.field(default_factory=dict)
    idle_mb: dict[Readiness, list[float]] = dataclasses.field(default_factory=dict)
    verified_mb: list[float] = dataclasses.field(default_factory=list)


async def make_ready(
    manager: SandboxManager, readiness: Readiness, client: docker.DockerClient
) -> tuple[ContainerInfo, float]:
    """A new pool member warmed to `readiness`, and its CPU time from creation to ready."""
    container = await asyncio.to_thread(manager.provider.create_pooled)
    entry = await asyncio.to_thread(manager.pool.warm, container, readiness)
    manager.pool.members.append(entry)
    return entry.container, await asyncio.to_thread(cpu_seconds, client, entry.container.id)


async def first_verification(manager: SandboxManager, thread: str) -> None:
    """Claim a member, build the five-node workflow and run it once with its fixtures."""
    await manager.write_file(thread, "src/bench.workflow.ts", SOURCE.read_bytes())
    built = await manager.toolchain(thread).compile("src/bench.workflow.ts")
    if not built.ok:
        raise SystemExit(f"the benchmark build failed: {built}")
    ran = await manager.toolchain(thread).execute(
        built.workflow, execution_id="bench", pin_data=built.fixtures
    )
    if ran.status != "success":
        raise SystemExit(f"the benchmark run failed: {ran}")


async def measure(
    managers: dict[str, SandboxManager], rounds: int, client: docker.DockerClient
) -> dict[str, Figures]:
    figures = {way: Figures() for way in WAYS}
    for n in range(rounds):
        for readiness in Readiness:
            for way in WAYS if n % 2 == 0 else WAYS[::-1]:
                _, cpu = await make_ready(managers[way], readiness, client)
                figures[way].cpu.setdefault(readiness, []).append(cpu)
    await asyncio.sleep(2)  # let the warm-ups' garbage go before sampling
    for way in WAYS:
        for entry in managers[way].pool.members:
            assert entry.readiness is not None
            mb = await asyncio.to_thread(container_mb, client, entry.container.id)
            figures[way].idle_mb.setdefault(entry.readiness, []).append(mb)
    for way in WAYS:
        managers[way].pool.size = len(managers[way].pool.members)  # claims take members, no refill
        ready_to_verify = [e for e in managers[way].pool.members if e.readiness == Readiness.VERIFY]
        managers[way].pool.members = ready_to_verify  # the claims below get these
        for n in range(len(ready_to_verify)):
            thread = f"{way}-verified-{n}"
            await first_verification(managers[way], thread)
            await asyncio.sleep(1)
            container = managers[way].entries[thread].container
            figures[way].verified_mb.append(
                await asyncio.to_thread(container_mb, client, container.id)
            )
        managers[way].pool.size = 0
    return figures


async def bare_floor(provider: SandboxProvider, client: docker.DockerClient) -> tuple[float, float]:
    """A started container with nothing running in it: its CPU time and memory."""
    bare = SandboxManager(provider, use_worker=False, adopt_pool=False)
    container = await bare.acquire("bench-bare")
    await asyncio.sleep(1)
    cpu = await asyncio.to_thread(cpu_seconds, client, container.id)
    mb = await asyncio.to_thread(container_mb, client, container.id)
    await bare.close()
    return cpu, mb


def row(runtime: str, name: str, ours: list[float], base: list[float], unit: str, note: str) -> str:
    record(f"ready ({runtime})", name, p50(ours), p50(base), unit, note=note)
    return f"{name:<52} {p50(ours):>9.2f} {p50(base):>9.2f} {p50(base) / p50(ours):>7.2f}x ({unit})"


async def main(rounds: int, wanted: RuntimeSetting) -> None:
    configure_logging(level="warning")
    engine = DockerEngine.connect()
    client = docker.from_env()
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    image = image_tags()[-1]
    # By default the runtime a server would choose here (gVisor where the engine has it).
    runtime = choose_runtime(wanted, engine.runtimes()).name
    limits = SandboxLimits(runtime=runtime)
    providers = {
        "ours": SandboxProvider(engine, image=image, owner=owner, limits=limits),
        "baseline": SandboxProvider(
            engine, image=image, owner=owner + "-b", limits=limits, kind=UNBUNDLED
        ),
    }
    managers = {way: SandboxManager(providers[way], adopt_pool=False) for way in WAYS}
    try:
        bare_cpu, bare_mb = await bare_floor(providers["ours"], client)
        figures = await measure(managers, rounds, client)
        ours, base = figures["ours"], figures["baseline"]
        floor = f"{runtime}; a bare started container: {bare_cpu:.2f} CPU-s, {bare_mb:.1f} MB"
        old = "baseline: modules file by file, no compile cache"
        build, verify = Readiness.BUILD, Readiness.VERIFY
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20

        def fit(figures: list[float]) -> str:
            return f"{total_mb / p50(figures):.0f} fit in {total_mb / 1024:.0f} GB"

        as_before = "baseline: a pool member as before (both threads, modules file by file)"
        # name, ours, baseline, unit, note
        table = [
            ("CPU-s to make a sandbox ready to build", ours.cpu[build], base.cpu[build],
             "CPU-s, p50", f"{old}; {floor}"),
            ("CPU-s to make a sandbox ready to build and verify", ours.cpu[verify],
             base.cpu[verify], "CPU-s, p50", old),
            ("idle sandbox ready to build", ours.idle_mb[build], base.idle_mb[verify],
             "MB, p50", f"{as_before}; {floor}; {fit(ours.idle_mb[build])}"),
            ("idle sandbox ready to build and verify", ours.idle_mb[verify],
             base.idle_mb[verify], "MB, p50", f"{old}; {fit(ours.idle_mb[verify])}"),
            ("a sandbox after its first verification", ours.verified_mb, base.verified_mb,
             "MB, p50", f"{old}; five nodes built and run once"),
        ]  # fmt: skip
        lines = [row(runtime, *figure) for figure in table]
    finally:
        for manager in managers.values():
            await manager.close()
        remove_owner(engine, owner)
        remove_owner(engine, owner + "-b")
        engine.close()
        client.close()
    print(f"{'figure (' + runtime + ')':<52} {'ours':>9} {'baseline':>9}")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runtime", choices=["auto", "runc", "runsc"], default="auto")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.runtime))
