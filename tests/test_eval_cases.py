"""Evaluation pieces that need no server: the case format and its errors, the expectation
rules, the rows file, scoring, and the baseline gate's statistics."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from evals.baseline import compare, fisher_lower
from evals.cases import Case, Diagnostic, Expectations, OutputAssertion, SourceCase, load_cases
from evals.expectations import diagnostic_problems, mismatches, output_problem
from evals.rows import Header, Row, RowsFile, UnitResult
from evals.scoring import RunInfo, results_document

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "evals" / "cases"

SOURCE = "import { workflow } from '@n8n/workflow-sdk';\nexport default workflow('x', 'x');\n"


def write(directory: Path, name: str, data: dict[str, Any] | str) -> Path:
    path = directory / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_the_bundled_cases_are_valid_and_cover_what_they_promise() -> None:
    loaded = load_cases([BUNDLED])
    assert loaded.problems == []
    kinds = Counter(case.kind for case in loaded.cases)
    assert kinds["source"] >= 25 and kinds["prompt"] >= 4, kinds
    must_fail = [c for c in loaded.cases if not c.spec.build.succeeds]
    assert len(must_fail) >= 4 and all(c.spec.build.diagnostics for c in must_fail)
    tags = {tag for case in loaded.cases for tag in case.spec.tags}
    wanted = {"manual", "webhook", "form", "chat", "schedule", "if", "switch", "merge", "filter"}
    wanted |= {"loop", "code", "data", "slack", "gmail", "google-sheets", "http", "destructive"}
    assert wanted <= tags, wanted - tags
    # Every destructive integration case expects its side effect to be simulated.
    for case in loaded.cases:
        if "destructive" in case.spec.tags and case.kind == "source":
            assert any(s.expect.simulated for s in case.spec.scenarios), case.id


def test_a_malformed_case_is_reported_by_path_and_field_and_the_rest_still_load(
    tmp_path: Path,
) -> None:
    good = write(
        tmp_path, "good.yaml", {"title": "ok", "source": SOURCE, "scenarios": [{"name": "a"}]}
    )
    bad_field = write(
        tmp_path,
        "bad-field.json",
        {
            "title": "x",
            "source": SOURCE,
            "scenarios": [
                {
                    "name": "a",
                    "expect": {
                        "outputs": [{"node": "N", "pointer": "0/x", "equals": 1}, {"node": "N"}]
                    },
                }
            ],
        },
    )
    typo = write(
        tmp_path, "typo.yaml", "title: x\nsource: y\nscenarios: [{name: a}]\nscenaros: []\n"
    )
    both = write(
        tmp_path,
        "both.yaml",
        {"title": "x", "source": SOURCE, "sourceFile": "a.ts", "scenarios": [{"name": "a"}]},
    )
    missing_file = write(
        tmp_path,
        "missing.yaml",
        {"title": "x", "sourceFile": "nope.ts", "scenarios": [{"name": "a"}]},
    )
    unparsable = write(tmp_path, "broken.yaml", "title: [unclosed\n")
    must_fail_with_scenarios = write(
        tmp_path,
        "mixed.yaml",
        {
            "title": "x",
            "source": SOURCE,
            "build": {"succeeds": False},
            "scenarios": [{"name": "a"}],
        },
    )
    only_directions = write(
        tmp_path,
        "quiet.yaml",
        {"title": "x", "conversation": ["[say nothing]"], "scenarios": [{"name": "a"}]},
    )

    loaded = load_cases([tmp_path])

    assert [case.id for case in loaded.cases] == ["good"]
    assert loaded.cases[0].path == good
    by_path: dict[str, list[str]] = {}
    for problem in loaded.problems:
        by_path.setdefault(problem.path, []).append(f"{problem.field}: {problem.message}")
    assert any("scenarios.0.expect.outputs.0.pointer" in p for p in by_path[str(bad_field)])
    assert any(
        p.startswith("scenarios.0.expect.outputs.1") and "equals, contains, matches, count" in p
        for p in by_path[str(bad_field)]
    )
    assert by_path[str(typo)] == ["scenaros: Extra inputs are not permitted"]
    assert "exactly one of source" in by_path[str(both)][0]
    assert by_path[str(missing_file)][0].startswith("sourceFile: cannot be read")
    assert "cannot be read" in by_path[str(unparsable)][0]
    assert "has no scenarios" in by_path[str(must_fail_with_scenarios)][0]
    assert "no user turn" in by_path[str(only_directions)][0]


def test_stage_directions_are_not_sent() -> None:
    loaded = load_cases(
        [BUNDLED / "prompt-filter-leads.yaml", BUNDLED / "prompt-webhook-slack-alert.yaml"]
    )
    turns = {case.id: case.spec.user_turns for case in loaded.cases}  # type: ignore[union-attr]
    assert len(turns["prompt-webhook-slack-alert"]) == 1
    assert turns["prompt-filter-leads"][0].startswith("A webhook receives")
    assert "Answer any question" not in turns["prompt-filter-leads"][0]


@pytest.mark.parametrize(
    ("assertion", "items", "problem"),
    [
        ({"pointer": "/0/total", "equals": 3}, [{"total": 3.0}], None),
        ({"pointer": "/0/total", "equals": 3}, [{"total": 4}], "expected to equal 3, got 4"),
        ({"pointer": "/0/ok", "equals": 1}, [{"ok": True}], "expected to equal 1, got true"),
        ({"pointer": "/0/tags", "contains": "b"}, [{"tags": ["a", "b"]}], None),
        ({"pointer": "", "contains": {"sku": "x"}}, [{"sku": "y"}, {"sku": "x", "n": 1}], None),
        ({"pointer": "/0/text", "contains": "day"}, [{"text": "Monday"}], None),
        ({"pointer": "/0/text", "matches": "^Mon"}, [{"text": "Tuesday"}], "match /^Mon/"),
        ({"count": 2}, [{}, {}], None),
        ({"count": 2}, [{}], "have 2 element(s)"),
        ({"pointer": "/3/x", "equals": 1}, [{}], "nothing at this pointer"),
        ({"pointer": "/0/a~1b", "equals": 1}, [{"a/b": 1}], None),
    ],
)
def test_output_assertions(
    assertion: dict[str, Any], items: list[Any], problem: str | None
) -> None:
    found = output_problem(OutputAssertion.model_validate({"node": "N", **assertion}), [items])
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_run_expectations_name_each_miss() -> None:
    expect = Expectations.model_validate(
        {
            "claimAtLeast": "verified",
            "reached": ["A", "B"],
            "notReached": ["C"],
            "simulated": ["S"],
            "notSimulated": ["A"],
        }
    )
    result = {
        "success": True,
        "claim": {"level": "partial"},
        "nodePreviews": [{"nodeName": "A"}, {"nodeName": "C"}],
        "simulatedNodes": ["A"],
    }
    assert mismatches(expect, result, {}) == [
        "claim is partial, expected at least verified",
        "node 'B' was not reached",
        "node 'C' was reached, expected not",
        "node 'S' was not simulated",
        "node 'A' was simulated, expected a real run",
    ]


def test_expected_build_diagnostics_must_all_be_found() -> None:
    errors = [{"code": "UNKNOWN_NODE_TYPE", "source": "catalog", "nodeName": "M", "message": "m"}]
    found = Diagnostic.model_validate({"code": "UNKNOWN_NODE_TYPE", "node": "M"})
    other = Diagnostic.model_validate({"source": "typescript"})
    assert diagnostic_problems([found], errors) == []
    assert "source='typescript'" in diagnostic_problems([found, other], errors)[0]


def test_a_torn_last_row_is_dropped_and_the_next_append_stands_alone(tmp_path: Path) -> None:
    rows = RowsFile(tmp_path / "eval-rows.jsonl")
    header = Header(
        run_id="r", started_at=datetime.now(UTC), fingerprint="f", iterations=1, cases=["a", "b"]
    )
    rows.start(header)
    first = Row(case="a", iteration=0, units=[UnitResult(name="s", passed=True)])
    rows.append(first)
    with rows.path.open("a") as file:
        file.write('{"kind":"row","case":"b","iter')  # the process died here
    assert rows.read() == (header, [first])
    second = Row(
        case="b", iteration=0, units=[UnitResult(name="s", passed=False, category="infrastructure")]
    )
    rows.append(second)
    assert rows.read()[1] == [first, second]


def _document(passes_by_case: dict[str, list[bool]], run_id: str) -> dict[str, Any]:
    """A results document with one unit per case and the given pass/fail per iteration."""
    cases = [
        Case(
            id=name,
            path=Path(f"{name}.yaml"),
            spec=SourceCase.model_validate(
                {"title": name, "source": SOURCE, "scenarios": [{"name": "s"}]}
            ),
            source=SOURCE,
            digest=name,
        )
        for name in passes_by_case
    ]
    rows = [
        Row(
            case=name,
            iteration=i,
            units=[
                UnitResult(name="s", passed=ok, category=None if ok else "expectation_mismatch")
            ],
        )
        for name, outcomes in passes_by_case.items()
        for i, ok in enumerate(outcomes)
    ]
    now = datetime.now(UTC)
    info = RunInfo(
        run_id=run_id,
        started_at=now,
        finished_at=now,
        iterations=4,
        concurrency=1,
        servers=["s"],
        complete=True,
    )
    return results_document(info, cases, rows, [])


def test_fisher_exact_matches_known_values() -> None:
    # 0/4 against 4/4: the hypergeometric tail is 1 / C(8, 4).
    assert fisher_lower(0, 4, 4, 4) == pytest.approx(1 / 70)
    assert fisher_lower(3, 4, 4, 4) == pytest.approx(0.5)
    assert fisher_lower(4, 4, 4, 4) == pytest.approx(1.0)
    # A classic table: 1/10 against 9/10 (one-sided p = 0.000547).
    assert fisher_lower(1, 10, 9, 10) == pytest.approx(0.000547, abs=1e-6)


def test_the_gate_fires_on_a_planted_regression_and_stays_quiet_on_noise() -> None:
    steady = {f"case-{n}": [True] * 4 for n in range(6)}
    baseline = _document(steady, "before")

    noise = _document(steady | {"case-0": [True, False, True, True]}, "noise")
    quiet = compare(baseline, noise)
    assert quiet["gate"]["passed"], quiet["gate"]
    assert [u["flag"] for u in quiet["units"]] == [None] * 6
    assert quiet["aggregate"]["flag"] is None

    planted = _document(steady | {"case-3": [False] * 4}, "planted")
    fired = compare(baseline, planted)
    assert not fired["gate"]["passed"]
    flagged = [(u["case"], u["flag"]) for u in fired["units"] if u["flag"]]
    assert flagged == [("case-3", "regression")]
    assert fired["gate"]["reasons"][0].startswith("case-3 / s: 100% → 0%")

    # Half the units slip a little each: no single unit is significant, the aggregate is.
    slipping = _document(
        {f"case-{n}": [True, True, False, False] if n % 2 else [True] * 4 for n in range(6)}
        | {f"more-{n}": [False, True, True, False] for n in range(6)},
        "slipping",
    )
    baseline_more = _document(
        {f"case-{n}": [True] * 4 for n in range(6)} | {f"more-{n}": [True] * 4 for n in range(6)},
        "before",
    )
    drift = compare(baseline_more, slipping)
    assert drift["aggregate"]["flag"] == "regression"
    assert not drift["gate"]["passed"]
    assert all(u["flag"] != "regression" for u in drift["units"])


def test_new_and_dropped_cases_are_listed_not_gated() -> None:
    before = _document({"a": [True], "b": [True]}, "before")
    after = _document({"a": [True], "c": [False]}, "after")
    compared = compare(before, after)
    assert compared["newUnits"] == ["c / s"]
    assert compared["missingUnits"] == ["b / s"]
    assert compared["gate"]["passed"]
