"""The benchmarks' summary: figures land in the run's file only when one is named, and the
table puts each beside its baseline with the ratio the right way round."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.summary import SUMMARY_ENV, Figure, record, table


def test_figures_reach_the_summary_file_and_the_table_says_which_way_is_better(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "summary.jsonl"
    monkeypatch.delenv(SUMMARY_ENV, raising=False)
    record("build", "unnamed", 1.0, 2.0, "ms")  # no file named: nothing is written
    assert not path.exists()
    monkeypatch.setenv(SUMMARY_ENV, str(path))
    record("build", "warm build, p50", 20.0, 1000.0, "ms")
    record("build", "builds/s", 40.0, 20.0, "builds/s", lower_is_better=False)
    record("agent", "own cost", 12.5, None, "ms", note="no baseline")
    figures = [Figure.model_validate_json(line) for line in path.read_text().splitlines()]
    assert [f.name for f in figures] == ["warm build, p50", "builds/s", "own cost"]
    rendered = table(figures).splitlines()
    assert rendered[2] == "| build | warm build, p50 | 20.00 | 1,000 | ms | 50x |  |"
    assert rendered[3] == "| build | builds/s | 40.00 | 20.00 | builds/s | 2x |  |"
    assert rendered[4] == "| agent | own cost | 12.50 | — | ms |  | no baseline |"
