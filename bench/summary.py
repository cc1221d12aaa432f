"""One table of every benchmark's figures, each beside its baseline from the same run.

Benchmarks call `record(...)` for each figure they print. With `INSTANCE_AI_BENCH_SUMMARY`
naming a file (as `make bench` does), each figure is appended to it as a JSON line; without it,
`record` does nothing. `python -m bench.summary FILE` prints them as one Markdown table headed
by the machine they ran on (what `docs/performance.md` keeps).

    python -m bench.summary .cache/bench-summary.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from pathlib import Path

from pydantic import BaseModel

__all__ = ["SUMMARY_ENV", "Figure", "machine", "record", "table"]

SUMMARY_ENV = "INSTANCE_AI_BENCH_SUMMARY"


class Figure(BaseModel):
    bench: str
    name: str
    ours: float
    baseline: float | None
    unit: str
    # Whether a smaller figure is the better one (a time, memory) or a larger one (a rate).
    lower_is_better: bool = True
    note: str = ""

    @property
    def ratio(self) -> str:
        if not self.baseline or not self.ours:
            return ""
        better = self.baseline / self.ours if self.lower_is_better else self.ours / self.baseline
        return f"{better:.3g}x"


def record(
    bench: str,
    name: str,
    ours: float,
    baseline: float | None,
    unit: str,
    *,
    lower_is_better: bool = True,
    note: str = "",
) -> None:
    """Add one figure to the run's summary file, if there is one."""
    path = os.environ.get(SUMMARY_ENV)
    if not path:
        return
    figure = Figure(
        bench=bench,
        name=name,
        ours=ours,
        baseline=baseline,
        unit=unit,
        lower_is_better=lower_is_better,
        note=note,
    )
    with Path(path).open("a", encoding="utf-8") as summary:
        summary.write(figure.model_dump_json() + "\n")


def machine() -> str:
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores, {memory_gb:.0f} GB, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    )


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def table(figures: list[Figure]) -> str:
    """The figures as one Markdown table; the ratio says how many times better ours is
    (below 1: worse than the baseline)."""
    lines = [
        "| bench | figure | ours | baseline | unit | ours vs baseline | note |",
        "| --- | --- | ---: | ---: | --- | ---: | --- |",
    ]
    lines += [
        f"| {f.bench} | {f.name} | {_number(f.ours)} | {_number(f.baseline)} | {f.unit} "
        f"| {f.ratio} | {f.note} |"
        for f in figures
    ]
    return "\n".join(lines)


def main(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    figures = [Figure.model_validate_json(line) for line in lines if line.strip()]
    print(f"\nSummary of this `make bench` run ({machine()}):\n")
    print(table(figures) if figures else "(no figure was recorded)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    main(parser.parse_args().path)
