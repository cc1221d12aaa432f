"""`instance-ai eval CASES...`: run evaluation cases against one or more servers and report.

Exit status: 0 the run completed (and passed the baseline gate, if one was given); 1 it completed
but some case files were invalid or some cases failed for infrastructure reasons; 2 usage (no
cases, bad options, a report directory that already holds another run); 3 the baseline gate
failed; 4 every server stayed unreachable and the run gave up; 130 interrupted (Ctrl-C). The
reports are written in every case but 2.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from evals.cases import load_cases
from evals.errors import RunError
from evals.progress import JsonLines, LiveBar, Reporter
from evals.report import HTML_FILE, MARKDOWN_FILE, RESULTS_FILE, headline
from evals.runner import (
    DEFAULT_CASE_TIMEOUT_SECONDS,
    Outcome,
    Runner,
    RunOptions,
    load_baseline,
)
from instance_ai_client.connection import DEFAULT_SERVER, ClientConfig
from instance_ai_client.terminal import (
    EXIT_FAILURE,
    EXIT_USAGE,
    ApiKeyOption,
    TlsCaOption,
    err,
    out,
)

__all__ = ["EXIT_ABORTED", "EXIT_GATE", "EXIT_INTERRUPTED", "eval_command", "exit_code"]

EXIT_GATE = 3
EXIT_ABORTED = 4
EXIT_INTERRUPTED = 130


def eval_command(
    cases: Annotated[
        list[Path], typer.Argument(help="case files, or directories searched for *.yaml|*.json")
    ],
    server: Annotated[
        list[str] | None,
        typer.Option(
            "--server",
            envvar="INSTANCE_AI_SERVER",
            help="host:port of a server; repeat to spread the cases over several "
            f"[{DEFAULT_SERVER}]",
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="case iterations in flight at once")
    ] = 4,
    iterations: Annotated[int, typer.Option(min=1, max=100, help="runs of each case (k)")] = 1,
    report: Annotated[
        Path, typer.Option("--report", help="directory for the rows file and the reports")
    ] = Path("eval-report"),
    baseline: Annotated[
        Path | None,
        typer.Option(help="an earlier eval-results.json: compare, and gate on regressions"),
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=1, help="seconds one case iteration may take")
    ] = DEFAULT_CASE_TIMEOUT_SECONDS,
    resume: Annotated[
        bool, typer.Option(help="continue the run whose rows file is in --report")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option(help="start again even though --report holds an earlier run")
    ] = False,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="progress as JSON lines")] = False,
) -> None:
    """Build and verify each case in its own thread (and sandbox), score it, and write
    eval-results.json, report.md and report.html."""
    loaded = load_cases(cases)
    for problem in loaded.problems:
        err.print(f"invalid case: {problem}", markup=False)
    if not loaded.cases:
        err.print("instance-ai eval: no valid case to run", markup=False)
        raise typer.Exit(EXIT_USAGE)
    options = RunOptions(
        servers=[
            ClientConfig(server=address, api_key=api_key, tls_ca_file=tls_ca)
            for address in (server or [DEFAULT_SERVER])
        ],
        report_dir=report,
        concurrency=concurrency,
        iterations=iterations,
        case_timeout=timeout,
        resume=resume,
        overwrite=overwrite,
    )
    reporter: Reporter = JsonLines() if as_json else LiveBar(err)
    try:
        if baseline is not None:
            options.baseline = load_baseline(baseline)
        outcome = asyncio.run(_run(Runner(options, loaded.cases, loaded.problems, reporter)))
    except RunError as exc:
        reporter.close()
        err.print(f"instance-ai eval: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    _summarise(outcome, report, as_json)
    raise typer.Exit(exit_code(outcome))


async def _run(runner: Runner) -> Outcome:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, runner.interrupt)
    loop.add_signal_handler(signal.SIGTERM, runner.interrupt)
    try:
        return await runner.run()
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)


def exit_code(outcome: Outcome) -> int:
    document = outcome.document
    if outcome.stop_reason == "interrupted":
        return EXIT_INTERRUPTED
    if outcome.stop_reason:
        return EXIT_ABORTED
    if not document.get("comparison", {}).get("gate", {}).get("passed", True):
        return EXIT_GATE
    if document["invalidCases"] or document["summary"]["failures"]["infrastructure"]:
        return EXIT_FAILURE
    return 0


def _summarise(outcome: Outcome, report: Path, as_json: bool) -> None:
    document = outcome.document
    files = [str(report / name) for name in (RESULTS_FILE, MARKDOWN_FILE, HTML_FILE)]
    if as_json:
        gate = document.get("comparison", {}).get("gate")
        summary = {"event": "done", "complete": outcome.complete, "stopReason": outcome.stop_reason}
        summary |= {"summary": document["summary"], "gate": gate, "reports": files}
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    state = "" if outcome.complete else f" (partial: {outcome.stop_reason})"
    out.print(f"{headline(document)}{state}", markup=False)
    gate = document.get("comparison", {}).get("gate")
    if gate is not None:
        out.print(f"baseline gate: {'passed' if gate['passed'] else 'FAILED'}", markup=False)
        for reason in gate["reasons"]:
            out.print(f"  regression: {reason}", markup=False)
    for file in files:
        out.print(f"  {file}", markup=False)
