"""Batch evaluation against real servers with real sandboxes: scoring a subset of the bundled
cases, resuming after Ctrl-C, the baseline gate through the command, a server dying mid-run, a
prompt case driven through the agent (the model is the stand-in), and the HTML report in a real
headless Chromium."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path
from typing import Any

import docker
import pytest
from PIL import Image
from playwright.async_api import async_playwright

from evals.cases import load_cases
from evals.errors import LanesExhaustedError
from evals.lanes import Lanes
from evals.report import write_reports
from evals.rows import ROWS_FILE, Row, UnitResult
from evals.runner import Runner, RunOptions
from evals.scoring import RunInfo, results_document
from instance_ai_client.connection import ClientConfig
from server.app import Application
from server.settings import Settings
from tests.agent_fixtures import model, with_model
from tests.browser_fixtures import CHROMIUM_ARGS
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.sandbox_fixtures import docker_env, owned_containers, remove_owned
from tests.test_cli import CLI, ServerProcess, start_server, stop_server

__all__ = ["model"]  # fixtures, shared

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "evals" / "cases"
QUICK = ["manual-set-if", "chat-trigger-reply", "code-throws", "broken-unknown-node"]


class Recorder:
    """A progress reporter that keeps what it is told."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.total = 0

    def started(self, total: int, done: int) -> None:
        self.total = total

    def finished(self, row: Row) -> None:
        self.rows.append(row)

    def note(self, message: str) -> None:
        self.notes.append(message)

    def close(self) -> None:
        pass


def bundled(*names: str) -> list[Path]:
    return [BUNDLED / f"{name}.yaml" for name in names]


@pytest.fixture
async def eval_server(
    make_docker_settings: Callable[..., Settings],
) -> AsyncIterator[tuple[Application, str]]:
    async with Application(make_docker_settings()) as app:
        yield app, f"127.0.0.1:{app.port}"


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """A results document without what differs between two runs of the same cases: the run's
    identity and timing, each duration, the servers' addresses and the ids of the workflows
    each run saved."""
    timing = {"durationMs", "latencyMs", "server", "workflowId"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in timing}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return {k: strip(v) for k, v in document.items() if k != "run"}


async def test_the_runner_scores_bundled_cases_on_real_sandboxes(
    eval_server: tuple[Application, str],
    tmp_path: Path,
    docker_client: docker.DockerClient,
    owner: str,
) -> None:
    _app, address = eval_server
    planted = tmp_path / "cases"
    planted.mkdir()
    wrong = (BUNDLED / "filter-active-users.yaml").read_text().replace("equals: ann", "equals: zed")
    (planted / "filter-planted.yaml").write_text(wrong)
    (planted / "malformed.yaml").write_text(
        "title: x\nsource: y\nscenarios: [{name: a, expect: {claimAtLeast: best}}]\n"
    )
    loaded = load_cases([*bundled(*QUICK, "webhook-order-slack", "prompt-form-to-sheet"), planted])
    recorder = Recorder()
    options = RunOptions(
        servers=[ClientConfig(server=address)], report_dir=tmp_path / "report", concurrency=3
    )

    outcome = await Runner(options, loaded.cases, loaded.problems, recorder).run()

    document = outcome.document
    assert outcome.complete and document["run"]["complete"]
    status = {case["id"]: case["status"] for case in document["cases"]}
    assert status == {
        "manual-set-if": "passed",
        "chat-trigger-reply": "passed",
        "code-throws": "passed",
        "broken-unknown-node": "passed",
        "webhook-order-slack": "passed",
        "prompt-form-to-sheet": "not_run",
        "filter-planted": "failed",
    }
    planted_unit = next(c for c in document["cases"] if c["id"] == "filter-planted")["units"][0]
    result = planted_unit["results"][0]
    assert result["category"] == "expectation_mismatch"
    assert 'Active Adults[0]/0/name: expected to equal "zed", got "ann"' in result["reason"]
    summary = document["summary"]
    assert summary["unitRuns"] == 9 and summary["unitPasses"] == 8
    assert summary["failures"]["expectation_mismatch"] == 1
    assert summary["failures"]["not_run"] == 1
    assert document["tags"]["slack"] == {"unitPasses": 2, "unitRuns": 2, "passRate": 1.0}
    assert [p["field"] for p in document["invalidCases"]] == ["scenarios.0.expect.claimAtLeast"]
    # The simulated Slack node of the example is reported as simulated, with the claim partial.
    slack_case = next(c for c in document["cases"] if c["id"] == "webhook-order-slack")
    assert {r["claim"] for u in slack_case["units"] for r in u["results"]} == {"partial"}

    report = tmp_path / "report"
    assert json.loads((report / "eval-results.json").read_text()) == document
    markdown = (report / "report.md").read_text()
    assert "| filter-planted | only active adults pass | 0 | expectation_mismatch |" in markdown
    assert "| prompt-form-to-sheet | not run: no model is configured" in markdown
    rows = (report / ROWS_FILE).read_text().splitlines()
    assert len(rows) == 1 + 7  # the header, then one row per case iteration
    assert len(recorder.rows) == 7
    # Each case ran in its own thread, and deleting the thread took its sandbox with it.
    assert owned_containers(owner) == []


async def run_cli(
    *args: str, interrupt_after_rows: int | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """`instance-ai eval ... --json`; with interrupt_after_rows, Ctrl-C once that many finished."""
    process = await asyncio.create_subprocess_exec(
        CLI,
        "eval",
        *args,
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    events: list[dict[str, Any]] = []
    interrupted = False
    async for line in process.stdout:
        events.append(json.loads(line))
        finished = sum(1 for e in events if e["event"] == "case")
        if not interrupted and finished == interrupt_after_rows:
            # Once: a second Ctrl-C while it exits would kill it outright.
            process.send_signal(signal.SIGINT)
            interrupted = True
    stderr = (await process.stderr.read()).decode()
    return await process.wait(), events, stderr


# Three evaluation runs of eight cases, on sandboxes under gVisor: ~130 s on two busy cores.
@pytest.mark.timeout(360)
async def test_an_interrupted_run_resumes_to_the_results_of_an_uninterrupted_one(
    eval_server: tuple[Application, str],
    tmp_path: Path,
    docker_client: docker.DockerClient,
    owner: str,
) -> None:
    _app, address = eval_server
    cases = [str(p) for p in bundled(*QUICK)]
    common = ["--server", address, "--concurrency", "1", "--iterations", "2"]
    interrupted = tmp_path / "interrupted"

    code, events, stderr = await run_cli(
        *cases, *common, "--report", str(interrupted), interrupt_after_rows=2
    )
    assert code == 130, stderr
    # The iteration cut short still had its thread deleted, and its sandbox with it.
    assert owned_containers(owner) == []
    partial = json.loads((interrupted / "eval-results.json").read_text())
    assert partial["run"]["complete"] is False and partial["run"]["stopReason"] == "interrupted"
    done_before = sum(len(case["iterations"]) for case in partial["cases"])
    assert 2 <= done_before < 8
    assert "partial" in (interrupted / "report.md").read_text()

    # Without --resume the directory is not silently overwritten.
    code, _events, stderr = await run_cli(*cases, *common, "--report", str(interrupted))
    assert code == 2 and "--resume" in stderr

    code, events, stderr = await run_cli(*cases, *common, "--report", str(interrupted), "--resume")
    assert code == 0, stderr
    assert events[0] == {"event": "start", "total": 8 - done_before, "alreadyDone": done_before}
    assert events[-1]["event"] == "done" and events[-1]["complete"] is True
    assert events[-1]["summary"]["unitRuns"] == 12
    resumed = json.loads((interrupted / "eval-results.json").read_text())
    assert resumed["run"]["complete"] is True
    assert resumed["run"]["id"] == partial["run"]["id"]

    straight = tmp_path / "straight"
    code, _events, stderr = await run_cli(*cases, *common, "--report", str(straight))
    assert code == 0, stderr
    uninterrupted = json.loads((straight / "eval-results.json").read_text())
    assert comparable(resumed) == comparable(uninterrupted)
    assert resumed["summary"]["unitRuns"] == 12 and resumed["summary"]["passRate"] == 1.0

    # A changed case makes the old rows meaningless: resuming is refused.
    edited = tmp_path / "edited"
    edited.mkdir()
    for case in cases:
        shutil.copy(case, edited)
    (edited / "manual-set-if.yaml").write_text(
        (edited / "manual-set-if.yaml").read_text().replace("amount: 250", "amount: 260")
    )
    code, _events, stderr = await run_cli(
        str(edited), *common, "--report", str(interrupted), "--resume"
    )
    assert code == 2 and "changed since it started" in stderr


async def test_the_baseline_gate_fails_the_command_on_a_planted_regression(
    eval_server: tuple[Application, str], tmp_path: Path
) -> None:
    _app, address = eval_server
    common = ["--server", address, "--concurrency", "4", "--iterations", "4"]
    case = BUNDLED / "chat-trigger-reply.yaml"

    code, _events, stderr = await run_cli(str(case), *common, "--report", str(tmp_path / "base"))
    assert code == 0, stderr

    regressed = tmp_path / "regressed"
    regressed.mkdir()
    (regressed / case.name).write_text(case.read_text().replace("equals: 3", "equals: 4"))
    baseline = tmp_path / "base" / "eval-results.json"
    code, _events, stderr = await run_cli(
        str(regressed), *common, "--report", str(tmp_path / "now"), "--baseline", str(baseline)
    )
    assert code == 3, stderr
    now = json.loads((tmp_path / "now" / "eval-results.json").read_text())
    gate = now["comparison"]["gate"]
    assert not gate["passed"]
    assert gate["reasons"] == [
        "chat-trigger-reply / echoes the chat message: 100% → 0% (p=0.0143)",
        "aggregate: 100% → 0% (p=0.0143)",
    ]
    assert "gate **failed**" in (tmp_path / "now" / "report.md").read_text()


async def test_no_reachable_server_is_a_clear_usage_error(tmp_path: Path) -> None:
    code, _events, stderr = await run_cli(
        str(BUNDLED / "manual-set-if.yaml"), "--server", "127.0.0.1:1", "--report", str(tmp_path)
    )
    assert code == 2
    assert "cannot reach any server (127.0.0.1:1)" in stderr


async def test_lanes_give_up_when_every_server_stays_unreachable() -> None:
    lanes = Lanes([ClientConfig(server="127.0.0.1:1")], probe_interval=0.1, abort_after=0.3)
    async with lanes:
        for _ in range(3):
            lane = await lanes.acquire(set())
            await lanes.release(lane, transport_failed=True)
        with pytest.raises(LanesExhaustedError, match=r"unreachable for 0 s: 127\.0\.0\.1:1"):
            await asyncio.wait_for(lanes.acquire(set()), timeout=5)


def drain(server: ServerProcess) -> None:
    """Keep reading the server's log so it never blocks on a full pipe."""
    stream = server.process.stderr
    assert stream is not None
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()


async def test_cases_move_off_a_server_that_dies_mid_run(
    eval_server: tuple[Application, str],
    tmp_path: Path,
    owner: str,
    docker_client: docker.DockerClient,
) -> None:
    _app, healthy = eval_server
    doomed_owner = f"{owner}-doomed"  # one live service per owner
    doomed = await asyncio.to_thread(
        start_server,
        tmp_path / "doomed",
        env=docker_env(doomed_owner),
    )
    drain(doomed)
    try:
        loaded = load_cases(bundled(*QUICK, "merge-append", "sort-and-limit", "split-out-lines"))
        recorder = Recorder()
        options = RunOptions(
            servers=[ClientConfig(server=doomed.address), ClientConfig(server=healthy)],
            report_dir=tmp_path / "report",
            concurrency=2,
            probe_interval=0.5,
        )
        runner = Runner(options, loaded.cases, [], recorder)
        running = asyncio.create_task(runner.run())
        while not any(row.server == doomed.address for row in recorder.rows):
            assert not running.done()
            await asyncio.sleep(0.05)
        doomed.process.send_signal(signal.SIGKILL)
        outcome = await running
    finally:
        stop_server(doomed)
        remove_owned(docker_client, doomed_owner)

    rows = outcome.rows
    assert sorted(row.case for row in rows) == sorted(case.id for case in loaded.cases)
    assert [row.status for row in rows] == ["passed"] * len(rows), [
        (row.case, row.units[0].reason) for row in rows if row.status != "passed"
    ]
    moved = [row for row in rows if row.attempts > 1]
    assert moved and all(row.server == healthy for row in moved)
    assert any("UNAVAILABLE" in note for note in recorder.notes)


async def test_a_prompt_case_is_built_by_the_agent_and_then_verified(
    make_docker_settings: Callable[..., Settings],
    model: FakeMessagesAPI,
    tmp_path: Path,
    docker_client: docker.DockerClient,
    owner: str,
) -> None:
    source = (ROOT / "examples" / "order-intake.workflow.ts").read_text()
    case = tmp_path / "prompt-orders.yaml"
    case.write_text(
        "title: orders\nconversation:\n  - Build the order intake workflow.\n"
        "  - '[If asked, the channel is C0SALES]'\n"
        "scenarios:\n  - name: big order\n    input: {body: {orderId: Z, amount: 9000}}\n"
        "    expect: {claimAtLeast: partial, reached: [Announce], simulated: [Announce]}\n"
    )
    path = "src/orders.workflow.ts"
    steps: list[Callable[[dict[str, Any]], Turn]] = [
        lambda _r: tool("workspace_write_file", {"path": path, "content": source}),
        lambda _r: tool("build-workflow", {"filePath": path}),
        lambda _r: text("Built and saved."),
    ]
    model.responder = lambda request: steps.pop(0)(request)
    loaded = load_cases([case])
    async with Application(make_docker_settings(**with_model(model))) as app:
        options = RunOptions(
            servers=[ClientConfig(server=f"127.0.0.1:{app.port}")], report_dir=tmp_path / "r"
        )
        outcome = await Runner(options, loaded.cases, [], Recorder()).run()

    (row,) = outcome.rows
    assert row.status == "passed", row.units
    assert row.build is not None and row.build.workflow_id
    assert steps == []  # the model was asked exactly three times: write, build, answer
    assert owned_containers(owner) == []


async def test_the_html_report_opens_in_chromium_and_draws_its_charts(tmp_path: Path) -> None:
    loaded = load_cases([BUNDLED])
    rows = [
        Row(
            case=case.id,
            iteration=0,
            duration_ms=800 + 97 * n,
            units=[
                UnitResult(
                    name=unit,
                    passed=n % 5 != 0,
                    category=None if n % 5 else "verification_failure",
                    reason="" if n % 5 else "the run failed at 'X': <b>boom</b>",
                )
                for unit in case.units
            ],
        )
        for n, case in enumerate(loaded.cases)
    ]
    now = datetime.now(UTC)
    info = RunInfo(
        run_id="html",
        started_at=now - timedelta(seconds=90),
        finished_at=now,
        iterations=1,
        concurrency=4,
        servers=["127.0.0.1:50051"],
        complete=True,
    )
    write_reports(tmp_path, results_document(info, loaded.cases, rows, []))

    chromium = shutil.which("chromium")
    assert chromium, "setup-system installs Debian's chromium"
    problems: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium,
            args=CHROMIUM_ARGS,
        )
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: None if r.url.startswith("file:") else problems.append(r.url))
        await page.goto((tmp_path / "report.html").as_uri())
        bars = await page.eval_on_selector_all(
            "#chart-tags rect.bar", "els => els.map(e => e.getBoundingClientRect().width)"
        )
        columns = await page.eval_on_selector_all(
            "#chart-latency rect.bar", "els => els.map(e => e.getBoundingClientRect().height)"
        )
        shots = [await page.locator(s).screenshot() for s in ("#chart-tags", "#chart-latency")]
        failures_text = await page.inner_text("#failures")
        await browser.close()

    assert problems == []  # no script errors, and nothing fetched from anywhere
    assert len(bars) >= 15 and sum(1 for width in bars if width > 0) >= 10
    assert sum(1 for height in columns if height > 0) >= 3
    for shot in shots:
        image = Image.open(BytesIO(shot)).convert("RGB")
        colours = image.getcolors(maxcolors=1 << 16) or []
        inked = sum(count for count, rgb in colours if rgb != (255, 255, 255))
        assert len(colours) > 8 and inked > 0.05 * image.width * image.height
    # Failure reasons are shown as text, never as markup.
    assert "<b>boom</b>" in failures_text
