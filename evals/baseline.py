"""Comparing a run with an earlier `eval-results.json`, and the gate that fails a run.

Each unit's passes and runs are compared with Fisher's exact test (one-sided: is the current
pass rate lower?) plus thresholds on the drop, so one unlucky iteration is noise, not a
regression. The thresholds are documented in docs/evals.md:

| flag | p-value | drop | baseline pass rate |
| --- | --- | --- | --- |
| regression | < 0.05 | >= 30 pp | >= 70 % |
| likely | < 0.20 | >= 15 pp | >= 50 % |
| watch | any | >= 35 pp | any |

The aggregate (all units together) is a regression at p < 0.05 with a drop of >= 5 pp. The gate
fails when any unit, or the aggregate, is a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any

__all__ = ["AGGREGATE_RULES", "UNIT_RULES", "Rule", "compare", "fisher_lower", "flag_for"]


@dataclass(frozen=True, kw_only=True)
class Rule:
    flag: str
    max_p: float
    min_drop: float
    min_baseline: float


UNIT_RULES = (
    Rule(flag="regression", max_p=0.05, min_drop=0.30, min_baseline=0.70),
    Rule(flag="likely", max_p=0.20, min_drop=0.15, min_baseline=0.50),
    Rule(flag="watch", max_p=1.0, min_drop=0.35, min_baseline=0.0),
)
AGGREGATE_RULES = (Rule(flag="regression", max_p=0.05, min_drop=0.05, min_baseline=0.0),)


def fisher_lower(current_passes: int, current_runs: int, base_passes: int, base_runs: int) -> float:
    """One-sided Fisher's exact test: the probability, with both samples drawn from one pass
    rate, of the current sample having this few passes or fewer."""
    total = current_runs + base_runs
    passes = current_passes + base_passes
    lowest = max(0, current_runs - (total - passes))
    denominator = comb(total, current_runs)
    tail = sum(
        comb(passes, x) * comb(total - passes, current_runs - x)
        for x in range(lowest, current_passes + 1)
    )
    return min(1.0, tail / denominator)


def flag_for(
    current: tuple[int, int], base: tuple[int, int], rules: tuple[Rule, ...]
) -> tuple[str | None, float, float]:
    """(flag or None, p-value, drop in pass rate) for (passes, runs) pairs."""
    current_rate = current[0] / current[1]
    base_rate = base[0] / base[1]
    drop = base_rate - current_rate
    p_value = fisher_lower(current[0], current[1], base[0], base[1])
    for rule in rules:
        if p_value < rule.max_p and drop >= rule.min_drop - 1e-9 and base_rate >= rule.min_baseline:
            return rule.flag, p_value, drop
    return None, p_value, drop


def compare(baseline: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    base_units = _units(baseline)
    current_units = _units(current)
    rows: list[dict[str, Any]] = []
    for key, now in current_units.items():
        before = base_units.get(key)
        if before is None or not now[1] or not before[1]:
            continue
        flag, p_value, drop = flag_for(now, before, UNIT_RULES)
        rows.append(
            {
                "case": key[0],
                "unit": key[1],
                "baseline": _counts(before),
                "current": _counts(now),
                "delta": round(-drop, 4),
                "pValue": round(p_value, 4),
                "flag": flag,
            }
        )
    aggregate = _aggregate(base_units, current_units)
    regressions = [r for r in rows if r["flag"] == "regression"]
    reasons = [
        f"{r['case']} / {r['unit']}: {r['baseline']['passRate']:.0%} → "
        f"{r['current']['passRate']:.0%} (p={r['pValue']})"
        for r in regressions
    ]
    if aggregate.get("flag") == "regression":
        base_rate, current_rate = aggregate["baseline"], aggregate["current"]
        reasons.append(
            f"aggregate: {base_rate['passRate']:.0%} → {current_rate['passRate']:.0%} "
            f"(p={aggregate['pValue']})"
        )
    return {
        "baselineRunId": (baseline.get("run") or {}).get("id"),
        "units": rows,
        "aggregate": aggregate,
        "newUnits": [f"{c} / {u}" for c, u in current_units if (c, u) not in base_units],
        "missingUnits": [f"{c} / {u}" for c, u in base_units if (c, u) not in current_units],
        "gate": {"passed": not reasons, "reasons": reasons},
    }


def _aggregate(
    base_units: dict[tuple[str, str], tuple[int, int]],
    current_units: dict[tuple[str, str], tuple[int, int]],
) -> dict[str, Any]:
    # Only the units both runs scored: a new or dropped case does not move the aggregate.
    shared = [
        k for k in current_units if k in base_units and current_units[k][1] and base_units[k][1]
    ]
    now = (sum(current_units[k][0] for k in shared), sum(current_units[k][1] for k in shared))
    before = (sum(base_units[k][0] for k in shared), sum(base_units[k][1] for k in shared))
    if not shared:
        return {"units": 0, "flag": None}
    flag, p_value, drop = flag_for(now, before, AGGREGATE_RULES)
    return {
        "units": len(shared),
        "baseline": _counts(before),
        "current": _counts(now),
        "delta": round(-drop, 4),
        "pValue": round(p_value, 4),
        "flag": flag,
    }


def _units(document: dict[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
    return {
        (str(case["id"]), str(unit["name"])): (int(unit["passes"]), int(unit["runs"]))
        for case in document.get("cases", [])
        for unit in case.get("units", [])
    }


def _counts(pair: tuple[int, int]) -> dict[str, Any]:
    return {"passes": pair[0], "runs": pair[1], "passRate": round(pair[0] / pair[1], 4)}
