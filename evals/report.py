"""The reports of a run, all written from the results document: `eval-results.json` (the
contract for other tools), `report.md` (fits a pull-request comment) and `report.html` (one
self-contained page: per-case results, failure reasons, pass rate by tag, latency spread)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader

from evals.rows import CATEGORIES

__all__ = [
    "HISTOGRAM_BINS",
    "HTML_FILE",
    "MARKDOWN_FILE",
    "RESULTS_FILE",
    "failures",
    "headline",
    "histogram",
    "html",
    "markdown",
    "not_run",
    "percent",
    "seconds",
    "write_reports",
]

RESULTS_FILE = "eval-results.json"
MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
HISTOGRAM_BINS = 10

_templates = Environment(
    loader=PackageLoader("evals", "templates"),
    # Always escaped: failure reasons and case titles are text, never markup.
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def write_reports(directory: Path, document: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _write(directory / RESULTS_FILE, json.dumps(document, indent=2, sort_keys=True) + "\n")
    _write(directory / MARKDOWN_FILE, markdown(document))
    _write(directory / HTML_FILE, html(document))


def _write(path: Path, text: str) -> None:
    # Whole or not at all: a reader (or a crash) never sees half a report.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def failures(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Each failed unit result: case, unit, iteration, category, reason."""
    return [
        {"case": case["id"], "unit": unit["name"]} | result
        for case in document["cases"]
        for unit in case["units"]
        for result in unit["results"]
        if not result["passed"] and result["category"] != "not_run"
    ]


def not_run(document: dict[str, Any]) -> list[dict[str, str]]:
    """Cases that could not run at all (e.g. prompt cases on a server with no model), once each."""
    found = []
    for case in document["cases"]:
        reasons = [
            result["reason"]
            for unit in case["units"]
            for result in unit["results"]
            if result["category"] == "not_run"
        ]
        if reasons:
            found.append({"case": case["id"], "reason": reasons[0]})
    return found


def headline(document: dict[str, Any]) -> str:
    summary = document["summary"]
    skipped = len(not_run(document))
    return (
        f"{summary['unitPasses']}/{summary['unitRuns']} unit runs passed "
        f"({percent(summary['passRate'])})" + (f", {skipped} case(s) not run" if skipped else "")
    )


def percent(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate * 100:.1f} %"


def seconds(ms: int | None) -> str:
    return "n/a" if ms is None else f"{ms / 1000:.1f} s"


def markdown(document: dict[str, Any]) -> str:
    run, summary = document["run"], document["summary"]
    state = "complete" if run["complete"] else f"**partial** ({run['stopReason']})"
    lines = [
        f"## Evaluation: {headline(document)}",
        "",
        f"Run `{run['id']}` · {summary['cases']} cases · {run['iterations']} iteration(s) · "
        f"concurrency {run['concurrency']} · {len(run['servers'])} server(s) · "
        f"{run['wallSeconds']:.0f} s · {state}",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| pass rate | {percent(summary['passRate'])} |",
        f"| pass@k (units passing at least once) | {percent(summary['passAtK'])} |",
        f"| pass^k (units passing every time) | {percent(summary['passHatK'])} |",
        "| failed unit runs | "
        + " · ".join(
            f"{c.replace('_', ' ')} {summary['failures'][c]}" for c in CATEGORIES if c != "not_run"
        )
        + " |",
        f"| units not run | {summary['failures']['not_run']} |",
        "| latency per case | "
        + " · ".join(f"{k} {seconds(summary['latencyMs'][k])}" for k in ("p50", "p90", "max"))
        + " |",
    ]
    if document["invalidCases"]:
        lines += ["", f"**{len(document['invalidCases'])} invalid case file(s)**, not run:", ""]
        lines += [
            f"- `{p['path']}` {p['field']}: {_cell(p['message'])}" for p in document["invalidCases"]
        ]
    if "comparison" in document:
        lines += ["", *_comparison_markdown(document["comparison"])]
    failed = failures(document)
    if failed:
        lines += ["", "### Failures", "", "| case | unit | iter | category | reason |"]
        lines += ["| --- | --- | --- | --- | --- |"]
        lines += [
            f"| {f['case']} | {_cell(f['unit'])} | {f['iteration']} | {f['category']} | "
            f"{_cell(f['reason'], 300)} |"
            for f in failed
        ]
    skipped = not_run(document)
    if skipped:
        lines += ["", "### Not run", "", "| case | why |", "| --- | --- |"]
        lines += [f"| {s['case']} | {_cell(s['reason'], 200)} |" for s in skipped]
    lines += ["", "<details><summary>All cases</summary>", ""]
    lines += [
        "| case | kind | tags | status | pass@k | pass^k |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for case in document["cases"]:
        units = case["units"]
        lines.append(
            f"| {case['id']} | {case['kind']} | {', '.join(case['tags'])} | {case['status']} | "
            f"{sum(u['passAtK'] for u in units)}/{len(units)} | "
            f"{sum(u['passHatK'] for u in units)}/{len(units)} |"
        )
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _comparison_markdown(comparison: dict[str, Any]) -> list[str]:
    gate = comparison["gate"]
    verdict = "passed" if gate["passed"] else "**failed**"
    lines = [f"### Against baseline `{comparison['baselineRunId']}`: gate {verdict}", ""]
    lines += [f"- {_cell(reason)}" for reason in gate["reasons"]]
    aggregate = comparison["aggregate"]
    if aggregate.get("units"):
        lines.append(
            f"- aggregate over {aggregate['units']} shared units: "
            f"{percent(aggregate['baseline']['passRate'])} → "
            f"{percent(aggregate['current']['passRate'])} (p={aggregate['pValue']})"
        )
    changed = [u for u in comparison["units"] if u["flag"] or u["delta"]]
    if changed:
        lines += ["", "| case | unit | baseline | current | Δ | p | flag |"]
        lines += ["| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [
            f"| {u['case']} | {_cell(u['unit'])} | {_fraction(u['baseline'])} "
            f"| {_fraction(u['current'])} | {u['delta'] * 100:+.0f} pp | "
            f"{u['pValue']} | {u['flag'] or ''} |"
            for u in changed
        ]
    return lines


def _fraction(counts: dict[str, Any]) -> str:
    return f"{counts['passes']}/{counts['runs']}"


def _cell(text: str, limit: int = 200) -> str:
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def html(document: dict[str, Any]) -> str:
    return _templates.get_template("report.html.j2").render(
        doc=document,
        headline=headline(document),
        failures=failures(document),
        not_run=not_run(document),
        categories=CATEGORIES,
        tag_bars=_tag_bars(document),
        histogram=histogram(
            [
                it["durationMs"]
                for case in document["cases"]
                for it in case["iterations"]
                if it["status"] != "not_run"
            ]
        ),
        percent=percent,
        seconds=seconds,
    )


def _tag_bars(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "tag": tag,
            "rate": t["passRate"],
            "label": f"{percent(t['passRate'])} ({t['unitPasses']}/{t['unitRuns']})",
        }
        for tag, t in document["tags"].items()
        if t["unitRuns"]
    ]


def histogram(durations: list[int], bins: int = HISTOGRAM_BINS) -> list[dict[str, Any]]:
    """Equal-width bins from the fastest to the slowest case: [{low, high, count}]."""
    if not durations:
        return []
    low, high = min(durations), max(durations)
    width = max(1.0, (high - low) / bins)
    counts = [0] * bins
    for duration in durations:
        counts[min(bins - 1, int((duration - low) / width))] += 1
    return [
        {"low": low + i * width, "high": low + (i + 1) * width, "count": count}
        for i, count in enumerate(counts)
    ]
