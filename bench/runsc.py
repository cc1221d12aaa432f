"""The runsc engine benchmark: sandboxes under gVisor driven by runsc itself, beside the same
run's baseline.

- **exec `true`**: a process started in a running sandbox by its job launcher (the runsc
  engine's way) beside a `runsc exec` in the same sandbox (the way of a replica that finds
  the launcher held, and of a process that wants stdin); and that `runsc exec` beside
  `docker exec` of the same image under Docker's runsc runtime.
- **wake**: a stopped sandbox woken and an exec of `true` answered: suspended (checkpointed,
  nothing of it running) and resumed, beside stopped and started afresh.
- **a verify-ready sandbox**: restored from the checkpoint of a warm one (its worker the main
  process, the compiler and the engine loaded), beside one made cold and warmed with a build
  and a run (what a pool member costs today), both on the runsc engine: CPU-seconds (the
  sandbox's cgroup: its processes and its kernel in user space; the `runsc restore` command's
  own time is outside it, and is in the wall time), wall time to the worker's first answer,
  and the memory of the idle sandbox after (its cgroup's, less the page cache it can drop).

- **the pool's trade** (members sized by the claims, `sandbox/pool.py`): a new thread's
  sandbox to its first command answered, claimed from a running member beside restored from
  the template when no member runs; and what a running member costs meanwhile, idle (CPU, as a
  share of a core) beside a suspended sandbox (nothing of it runs: no cgroup, no process).

Needs the engine, the image (`make sandbox-image`) and root. Everything it creates carries a
unique owner label and is removed at the end.

    python -m bench.runsc [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import docker

from bench.sandbox import p50
from bench.summary import record
from sandbox.docker_engine import DockerEngine
from sandbox.engine import ContainerEngine, ContainerInfo, SandboxLimits
from sandbox.image.build import image_tags
from sandbox.image.rootfs import WORKSPACE
from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider, remove_owner
from sandbox.readiness import Readiness
from sandbox.runsc_engine import CGROUP_PARENT, RunscEngine
from sandbox.runtimes import RUNSC
from sandbox.worker import WorkerClient
from sandbox.workspace_seed import initialise
from server.logs import configure_logging
from server.settings import Settings

CGROUPS = Path("/sys/fs/cgroup")
LIMITS = SandboxLimits(runtime=RUNSC)


def cgroup_cpu_s(container_id: str) -> float:
    path = CGROUPS / "cpuacct" / CGROUP_PARENT.strip("/") / container_id / "cpuacct.usage"
    return int(path.read_text()) / 1e9


def cgroup_mb(container_id: str) -> float:
    directory = CGROUPS / "memory" / CGROUP_PARENT.strip("/") / container_id
    usage = int((directory / "memory.usage_in_bytes").read_text())
    stats = dict(line.split() for line in (directory / "memory.stat").read_text().splitlines())
    return (usage - int(stats.get("total_inactive_file", 0))) / 2**20


def exec_ms(engine: ContainerEngine, container: ContainerInfo, *, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        result = engine.exec(container.id, ["true"], workdir=WORKSPACE)
        times.append((time.perf_counter() - started) * 1000)
        assert result.exit_code == 0, result
    return times


async def exec_figures(
    runsc: RunscEngine, docker_engine: DockerEngine, image: str, owner: str, rounds: int
) -> dict[str, list[float]]:
    """ms per exec of `true`, by way: "launcher", "runsc exec", "docker exec"."""
    ours = SandboxProvider(runsc, image=image, owner=owner, limits=LIMITS).ensure("bench-exec")
    base = SandboxProvider(docker_engine, image=image, owner=owner, limits=LIMITS).ensure(
        "bench-exec"
    )
    exec_ms(runsc, ours, rounds=1)  # this engine holds the launcher's channel from now on
    replica = RunscEngine(runsc.client, runsc.root)  # finds it held: `runsc exec`
    pairs: dict[str, tuple[ContainerEngine, ContainerInfo]] = {
        "launcher": (runsc, ours),
        "runsc exec": (replica, ours),
        "docker exec": (docker_engine, base),
    }
    samples: dict[str, list[float]] = {way: [] for way in pairs}
    ways = list(pairs)
    for n in range(rounds):  # turn about, so that all see the same machine
        for way in ways[n % len(ways) :] + ways[: n % len(ways)]:
            samples[way] += exec_ms(*pairs[way], rounds=5)
    return samples


async def ready_figures(
    provider: SandboxProvider, engine: RunscEngine, rounds: int, work: Path
) -> dict[str, dict[str, list[float]]]:
    """Per way (restored, cold): CPU-s, ms to the worker's first answer, idle MB."""
    manager = SandboxManager(provider, adopt_pool=False)
    figures: dict[str, dict[str, list[float]]] = {
        way: {"cpu": [], "ms": [], "mb": []} for way in ("restored", "cold")
    }
    try:
        # The template: a sandbox warmed to build and verify, its channel closed, saved.
        template = await asyncio.to_thread(provider.create_pooled)
        entry = await asyncio.to_thread(manager.pool.warm, template, Readiness.VERIFY)
        entry.drop_worker()
        image_dir = work / "template"
        await asyncio.to_thread(engine.checkpoint, template.id, image_dir, leave_running=False)

        async def restored(thread: str) -> ContainerInfo:
            # Made its own as a cold one is (its workspace seeded), then its worker asked.
            container, _ = await asyncio.to_thread(provider.ensure_started, thread, image_dir)
            await asyncio.to_thread(initialise, engine, provider.kind, container)
            worker = await asyncio.to_thread(WorkerClient.start, engine, container.id)
            stats = await asyncio.to_thread(worker.call, "stats")
            worker.close()
            assert stats["threads"] == {"compiler": True, "engine": True}, stats
            return container

        async def cold(thread: str) -> ContainerInfo:
            container = await asyncio.to_thread(provider.create_pooled)
            warmed = await asyncio.to_thread(manager.pool.warm, container, Readiness.VERIFY)
            warmed.drop_worker()
            return container

        ways: dict[str, Callable[[str], Awaitable[ContainerInfo]]] = {
            "restored": restored,
            "cold": cold,
        }
        for n in range(rounds):
            order = ("restored", "cold") if n % 2 == 0 else ("cold", "restored")
            for way in order:
                started = time.perf_counter()
                container = await ways[way](f"bench-{way}-{n}")
                figures[way]["ms"].append((time.perf_counter() - started) * 1000)
                figures[way]["cpu"].append(cgroup_cpu_s(container.id))
                await asyncio.sleep(1)
                figures[way]["mb"].append(cgroup_mb(container.id))
    finally:
        await manager.close()
    return figures


async def wake_figures(
    provider: SandboxProvider, engine: RunscEngine, rounds: int
) -> tuple[list[float], list[float]]:
    """ms from a stopped sandbox to an exec of `true` answered in it: suspended and resumed
    (its memory restored) beside stopped and started afresh (today's idle stop)."""
    container = await asyncio.to_thread(provider.ensure, "bench-wake")
    resumed: list[float] = []
    restarted: list[float] = []
    for n in range(rounds):
        for way in ("resumed", "restarted") if n % 2 == 0 else ("restarted", "resumed"):
            if way == "resumed":
                await asyncio.to_thread(engine.suspend, container.id)
            else:
                await asyncio.to_thread(engine.kill, container.id)
            started = time.perf_counter()
            await asyncio.to_thread(engine.start, container.id)
            await asyncio.to_thread(functools.partial(exec_ms, engine, container, rounds=1))
            (resumed if way == "resumed" else restarted).append(
                (time.perf_counter() - started) * 1000
            )
    return resumed, restarted


async def pool_figures(
    provider: SandboxProvider, engine: RunscEngine, rounds: int
) -> dict[str, list[float]]:
    """ms from a new thread to its first command answered, from a running pool member
    ("member") and restored from the template with none running ("restored"); a running idle
    member's CPU, % of a core ("idle"); a suspended sandbox's ("suspended": its cgroup gone, 0)."""
    figures: dict[str, list[float]] = {"member": [], "restored": [], "idle": [], "suspended": []}
    pooled = SandboxManager(provider, pool_size=1, adopt_pool=False)
    bare = SandboxManager(provider, pool_size=0, adopt_pool=False)
    try:
        await pooled.pool.fill()  # its template made meanwhile
        while pooled.pool.templates and pooled.pool.templates.ready(Readiness.BUILD) is None:
            pooled.pool.template(Readiness.BUILD)
            await asyncio.sleep(0.5)
        for n in range(rounds):
            await pooled.pool.fill()
            member = pooled.pool.members[0].container.id
            before = cgroup_cpu_s(member)
            await asyncio.sleep(10)
            figures["idle"].append((cgroup_cpu_s(member) - before) / 10 * 100)
            for way, manager in (("member", pooled), ("restored", bare)):
                started = time.perf_counter()
                result = await manager.run_command(f"bench-{way}-{n}", "true")
                figures[way].append((time.perf_counter() - started) * 1000)
                assert result.success, result
            await bare.stop(f"bench-restored-{n}")  # suspended: nothing of it runs
            info = await asyncio.to_thread(provider.get, f"bench-restored-{n}")
            assert info is not None and info.status == "exited"
            cgroup = CGROUPS / "cpuacct" / CGROUP_PARENT.strip("/") / info.container_id
            figures["suspended"].append(0.0 if not cgroup.exists() else float("nan"))
    finally:
        await pooled.close()
        await bare.close()
    return figures


def row(name: str, ours: list[float], base: list[float], unit: str, note: str) -> str:
    record("runsc", name, p50(ours), p50(base), unit, note=note)
    ratio = p50(base) / p50(ours)
    return f"{name:<52} {p50(ours):>9.2f} {p50(base):>9.2f} {ratio:>7.2f}x ({unit})"


async def main(rounds: int) -> None:
    configure_logging(level="warning")
    client = docker.from_env()
    docker_engine = DockerEngine(client)
    if RUNSC not in docker_engine.runtimes():
        raise SystemExit("the Docker engine has no runsc runtime: run `make setup`")
    engine = RunscEngine(client, Settings.model_fields["sandbox_runsc_root"].default)
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    image = image_tags()[-1]
    provider = SandboxProvider(engine, image=image, owner=owner, limits=LIMITS)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-runsc-") as work:
            execs = await exec_figures(engine, docker_engine, image, owner, rounds)
            ready = await ready_figures(provider, engine, rounds, Path(work))
            resumed, restarted = await wake_figures(provider, engine, rounds)
            pool = await pool_figures(provider, engine, rounds)
        restored, cold = ready["restored"], ready["cold"]
        cold_note = "baseline: made cold and warmed with a build and a run (a pool member today)"
        lines = [
            row("exec `true` in a running sandbox", execs["launcher"], execs["runsc exec"],
                "ms, p50", "started by the job launcher; baseline: runsc exec in the same "
                "sandbox"),
            row("exec `true`, runsc exec vs docker exec", execs["runsc exec"],
                execs["docker exec"], "ms, p50",
                "runsc exec; baseline: docker exec under Docker's runsc runtime"),
            row("CPU-s to a sandbox ready to build and verify", restored["cpu"], cold["cpu"],
                "CPU-s, p50", f"restored from a warm one's checkpoint; {cold_note}"),
            row("wall to its worker's first answer", restored["ms"], cold["ms"], "ms, p50",
                f"restore + the worker's channel; {cold_note}"),
            row("idle sandbox ready to build and verify", restored["mb"], cold["mb"],
                "MB, p50", "its cgroup, less droppable page cache"),
            row("wake + exec `true` of a stopped sandbox", resumed, restarted, "ms, p50",
                "suspended (0 CPU, 0 MB while stopped) and resumed with its memory; "
                "baseline: stopped and started afresh, its memory lost"),
            row("new thread to first command, no member running", pool["restored"],
                pool["member"], "ms, p50", "restored from the template; baseline: claimed "
                "from a running pool member (what keeping one costs: the next row)"),
        ]  # fmt: skip
        idle, suspended = p50(pool["idle"]), p50(pool["suspended"])
        record("runsc", "idle pool member", idle, None, "% of a core, p50",
               note=f"a suspended sandbox: {suspended:.2f} % (no cgroup, no process)")  # fmt: skip
        lines.append(
            f"{'an idle pool member, % of a core':<52} {idle:>9.2f} "
            f"(a suspended sandbox: {suspended:.2f}: nothing of it runs)"
        )
    finally:
        remove_owner(engine, owner)
        remove_owner(docker_engine, owner)
        client.close()
    print(f"{'figure (runsc engine)':<52} {'ours':>9} {'baseline':>9}")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.rounds))
