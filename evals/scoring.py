"""From rows to the results document (`eval-results.json`, schema in docs/evals.md).

A *unit* is what gets scored: a scenario of a case, or the build of a case that must not build.
Each iteration gives each unit a pass or a fail; across k iterations a unit has pass@k (passed
at least once) and pass^k (passed every time). Units not run (a prompt case with no model, a
run interrupted before them) count in no rate.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evals.cases import Case, CaseProblem
from evals.rows import CATEGORIES, Row

__all__ = ["SCHEMA_VERSION", "RunInfo", "latency", "results_document"]

SCHEMA_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    run_id: str
    started_at: datetime
    finished_at: datetime
    iterations: int
    concurrency: int
    servers: list[str]
    complete: bool
    stop_reason: str = ""


def results_document(
    info: RunInfo, cases: list[Case], rows: list[Row], problems: list[CaseProblem]
) -> dict[str, Any]:
    by_case: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_case[row.case].append(row)
    case_docs = [_case(case, sorted(by_case[case.id], key=lambda r: r.iteration)) for case in cases]
    return {
        "schemaVersion": SCHEMA_VERSION,
        "run": {
            "id": info.run_id,
            "startedAt": info.started_at.isoformat(),
            "finishedAt": info.finished_at.isoformat(),
            "wallSeconds": round((info.finished_at - info.started_at).total_seconds(), 3),
            "complete": info.complete,
            "stopReason": info.stop_reason,
            "iterations": info.iterations,
            "concurrency": info.concurrency,
            "servers": info.servers,
        },
        "summary": _summary(case_docs, rows),
        "tags": _by_tag(cases, case_docs),
        "cases": case_docs,
        "invalidCases": [problem.as_json() for problem in problems],
    }


def _case(case: Case, rows: list[Row]) -> dict[str, Any]:
    units = []
    for name in case.units:
        results = [
            {"iteration": row.iteration} | unit.model_dump(mode="json", by_alias=True)
            for row in rows
            for unit in row.units
            if unit.name == name
        ]
        scored = [r for r in results if r["category"] != "not_run"]
        passes = sum(1 for r in scored if r["passed"])
        units.append(
            {
                "name": name,
                "runs": len(scored),
                "passes": passes,
                "passRate": _rate(passes, len(scored)),
                "passAtK": bool(scored) and passes > 0,
                "passHatK": bool(scored) and passes == len(scored),
                "results": results,
            }
        )
    statuses = Counter(row.status for row in rows)
    return {
        "id": case.id,
        "title": case.spec.title,
        "kind": case.kind,
        "tags": case.spec.tags,
        "complexity": case.spec.complexity,
        "path": str(case.path),
        "status": _case_status(statuses, len(rows)),
        "units": units,
        "iterations": [
            {
                "iteration": row.iteration,
                "status": row.status,
                "durationMs": row.duration_ms,
                "server": row.server,
                "attempts": row.attempts,
                "build": row.build.model_dump(mode="json", by_alias=True) if row.build else None,
            }
            for row in rows
        ],
    }


def _case_status(statuses: Counter[str], ran: int) -> str:
    if not ran:
        return "pending"
    for status in ("infrastructure", "failed", "not_run"):
        if statuses[status]:
            return status
    return "passed"


def _summary(case_docs: list[dict[str, Any]], rows: list[Row]) -> dict[str, Any]:
    units = [unit for case in case_docs for unit in case["units"]]
    scored_units = [unit for unit in units if unit["runs"]]
    runs = sum(unit["runs"] for unit in units)
    passes = sum(unit["passes"] for unit in units)
    failures: Counter[str] = Counter(
        unit.category for row in rows for unit in row.units if unit.category
    )
    return {
        "cases": len(case_docs),
        "casesRun": sum(1 for case in case_docs if case["status"] not in ("pending", "not_run")),
        "units": len(units),
        "unitRuns": runs,
        "unitPasses": passes,
        "passRate": _rate(passes, runs),
        "passAtK": _rate(sum(1 for u in scored_units if u["passAtK"]), len(scored_units)),
        "passHatK": _rate(sum(1 for u in scored_units if u["passHatK"]), len(scored_units)),
        "failures": {category: failures[category] for category in CATEGORIES},
        "latencyMs": latency([row.duration_ms for row in rows if row.status != "not_run"]),
    }


def _by_tag(cases: list[Case], case_docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case, doc in zip(cases, case_docs, strict=True):
        for tag in case.spec.tags:
            for unit in doc["units"]:
                tally[tag][0] += unit["passes"]
                tally[tag][1] += unit["runs"]
    return {
        tag: {"unitPasses": passes, "unitRuns": runs, "passRate": _rate(passes, runs)}
        for tag, (passes, runs) in sorted(tally.items())
    }


def latency(durations: list[int]) -> dict[str, int | None]:
    if not durations:
        return {"count": 0, "p50": None, "p90": None, "max": None}
    ordered = sorted(durations)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "count": len(ordered),
        "p50": int(statistics.median(ordered)),
        "p90": p90,
        "max": ordered[-1],
    }


def _rate(passes: int, runs: int) -> float | None:
    return round(passes / runs, 4) if runs else None
