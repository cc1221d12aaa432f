"""Evaluation benchmark: wall time for the bundled source cases at concurrency 1, 2, 4 and 8
against one server on this machine, each beside the sequential run (concurrency 1) measured in
the same invocation, plus where the CPU went in each run (the server process, the runner, and
everything else: the sandboxes' Node workers and dockerd), to show where scaling stops.

The server is a separate `instance-ai serve` process with its default warm pool, under a
throw-away owner label; everything it made is removed at the end.

    python -m bench.eval [--levels 1,2,4,8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.sandbox import cleanup
from bench.summary import record
from evals.cases import load_cases
from evals.rows import Row
from evals.runner import Runner, RunOptions
from instance_ai_client.connection import ClientConfig
from sandbox.docker_engine import DockerEngine

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "evals" / "cases"
TICKS = os.sysconf("SC_CLK_TCK")


class Quiet:
    def started(self, total: int, done: int) -> None: ...
    def finished(self, row: Row) -> None: ...
    def note(self, message: str) -> None:
        print(f"  note: {message}", file=sys.stderr)

    def close(self) -> None: ...


@dataclass
class Figures:
    concurrency: int
    wall: float
    passed: int
    total: int
    busy_cores: float
    server_cpu: float
    runner_cpu: float
    other_cpu: float
    case_p50_s: float


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot (all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICKS


def process_cpu(pid: int) -> float:
    """CPU seconds of a process and its reaped children."""
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in parts[11:15]) / TICKS


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def start_server(
    data_dir: Path, owner: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    cli = shutil.which("instance-ai", path=str(Path(sys.executable).parent))
    assert cli, "run from the project's virtual environment"
    process = subprocess.Popen(
        # Logs at info: the "serving" record carries the address (the rest is drained).
        [cli, "serve", "--port", "0", "--data-dir", str(data_dir), "--log-format", "json"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "INSTANCE_AI_SANDBOX_OWNER": owner, **(env or {})},
    )
    assert process.stderr is not None
    for line in process.stderr:
        record = json.loads(line)
        if record.get("event") == "serving":
            # Keep reading the log, or the server blocks on a full pipe.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, str(record["address"])
    raise SystemExit("the server did not start")


async def run_level(
    address: str | list[str],
    pid: int | list[int],
    concurrency: int,
    report: Path,
    limit: int | None = None,
) -> Figures:
    """The source cases at `concurrency`, spread over the servers at `address` (processes
    `pid`, whose CPU time is counted as the server's)."""
    addresses = [address] if isinstance(address, str) else address
    pids = [pid] if isinstance(pid, int) else pid
    loaded = load_cases([CASES])
    cases = [case for case in loaded.cases if case.kind == "source"][:limit]
    options = RunOptions(
        servers=[ClientConfig(server=a) for a in addresses],
        report_dir=report / f"c{concurrency}",
        concurrency=concurrency,
    )
    busy0 = machine_cpu()
    server0, runner0 = sum(process_cpu(p) for p in pids), own_cpu()
    started = time.perf_counter()
    outcome = await Runner(options, cases, [], Quiet()).run()
    wall = time.perf_counter() - started
    busy1 = machine_cpu()
    for row in outcome.rows:  # a figure with a case that did not pass says which and why
        for unit in row.units:
            if not unit.passed:
                print(
                    f"  concurrency {concurrency}: {row.case} / {unit.name} {unit.category}: "
                    f"{unit.reason}",
                    file=sys.stderr,
                )
    server_cpu = sum(process_cpu(p) for p in pids) - server0
    runner_cpu = own_cpu() - runner0
    busy = busy1 - busy0
    return Figures(
        concurrency=concurrency,
        wall=wall,
        passed=sum(1 for row in outcome.rows if row.status == "passed"),
        total=len(outcome.rows),
        busy_cores=busy / wall,
        server_cpu=server_cpu,
        runner_cpu=runner_cpu,
        other_cpu=max(0.0, busy - server_cpu - runner_cpu),
        case_p50_s=statistics.median(row.duration_ms for row in outcome.rows) / 1000,
    )


async def main(levels: list[int]) -> None:
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    engine = DockerEngine.connect()
    with tempfile.TemporaryDirectory() as scratch:
        process, address = start_server(Path(scratch) / "data", owner)
        try:
            # One warm-up case, so the image's first start is not in the sequential figure.
            await run_level(address, process.pid, 1, Path(scratch) / "warm", limit=2)
            figures = [
                await run_level(address, process.pid, level, Path(scratch) / "runs")
                for level in levels
            ]
        finally:
            process.terminate()
            process.wait()
            cleanup(engine, owner)
            engine.close()
    base = figures[0]
    cores = os.cpu_count()
    print(
        f"bundled source cases on one server, {cores} cores; baseline: concurrency "
        f"{base.concurrency} (sequential) in the same run"
    )
    print(
        f"{'conc':>4} {'wall s':>7} {'speed-up':>8} {'cases/min':>9} {'passed':>7} "
        f"{'busy cores':>10} {'server cpu s':>12} {'runner cpu s':>12} "
        f"{'sandbox+docker cpu s':>20} {'case p50 s':>10}"
    )
    for f in figures:
        print(
            f"{f.concurrency:>4} {f.wall:>7.1f} {base.wall / f.wall:>7.2f}x "
            f"{f.total / f.wall * 60:>9.1f} {f.passed:>3}/{f.total:<3} {f.busy_cores:>10.2f} "
            f"{f.server_cpu:>12.1f} {f.runner_cpu:>12.1f} {f.other_cpu:>20.1f} "
            f"{f.case_p50_s:>10.2f}"
        )
        record(
            "eval",
            f"{f.total} source cases at concurrency {f.concurrency}, wall",
            f.wall,
            base.wall,
            "s",
            note=f"{f.passed}/{f.total} passed, case p50 {f.case_p50_s:.2f} s; "
            f"baseline: concurrency {base.concurrency}",
        )
    saturated = [f for f in figures if f.busy_cores >= 0.85 * (cores or 1)]
    if saturated:
        print(
            f"CPU-bound from concurrency {saturated[0].concurrency}: the machine's {cores} "
            "cores are busy; more cases in flight only queue for them."
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,2,4,8")
    arguments = parser.parse_args()
    asyncio.run(main([int(v) for v in arguments.levels.split(",")]))
