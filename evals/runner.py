"""A batch evaluation run: every case and iteration, spread over the servers, each case iteration in
its own thread (so its own sandbox), each finished one appended to the rows file at once, and the
reports written from the rows at the end — also when the run is interrupted or gives up."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from evals.baseline import compare
from evals.cases import Case, CaseProblem
from evals.errors import LanesExhaustedError, RowsFileError, RunError, TransportError
from evals.execute import failed_units, run_case
from evals.lanes import (
    ABORT_AFTER_SECONDS,
    PROBE_INTERVAL_SECONDS,
    Lane,
    Lanes,
)
from evals.progress import Reporter
from evals.report import write_reports
from evals.rows import ROWS_FILE, Header, Row, RowsFile
from evals.scoring import RunInfo, results_document
from instance_ai_client.connection import ClientConfig

__all__ = [
    "DEFAULT_CASE_TIMEOUT_SECONDS",
    "MAX_ATTEMPTS",
    "Outcome",
    "RunOptions",
    "Runner",
    "fingerprint",
    "load_baseline",
]

DEFAULT_CASE_TIMEOUT_SECONDS = 900.0
MAX_ATTEMPTS = 3


@dataclass(kw_only=True)
class RunOptions:
    servers: list[ClientConfig]
    report_dir: Path
    concurrency: int = 4
    iterations: int = 1
    case_timeout: float = DEFAULT_CASE_TIMEOUT_SECONDS
    resume: bool = False
    overwrite: bool = False
    baseline: dict[str, Any] | None = None
    probe_interval: float = PROBE_INTERVAL_SECONDS
    abort_after: float = ABORT_AFTER_SECONDS


@dataclass(kw_only=True)
class Outcome:
    document: dict[str, Any]
    stop_reason: str = ""
    rows: list[Row] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.stop_reason


def fingerprint(cases: list[Case], iterations: int) -> str:
    """What a resumed run must match: the same cases (by content) and iterations."""
    parts = [iterations, sorted((case.id, case.digest) for case in cases)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


class Runner:
    def __init__(
        self,
        options: RunOptions,
        cases: list[Case],
        problems: list[CaseProblem],
        reporter: Reporter,
    ) -> None:
        self.options = options
        self.cases = cases
        self.problems = problems
        self.reporter = reporter
        self.rows_file = RowsFile(options.report_dir / ROWS_FILE)
        self._rows: list[Row] = []
        self._stop_reason = ""
        self._workers: list[asyncio.Task[None]] = []
        self._deletions: set[asyncio.Task[None]] = set()

    def interrupt(self) -> None:
        """Ctrl-C: stop starting and finishing cases; the report is written from what is done."""
        self._stop_reason = self._stop_reason or "interrupted"
        for worker in self._workers:
            worker.cancel()

    async def run(self) -> Outcome:
        header, done = self._open_rows()
        self._rows = list(done)
        finished = {(row.case, row.iteration) for row in done}
        jobs = [
            (case, iteration)
            for iteration in range(self.options.iterations)
            for case in self.cases
            if (case.id, iteration) not in finished
        ]
        self.reporter.started(len(jobs), len(finished))
        async with Lanes(
            self.options.servers,
            probe_interval=self.options.probe_interval,
            abort_after=self.options.abort_after,
            on_note=self.reporter.note,
        ) as lanes:
            await self._preflight(lanes)
            queue: asyncio.Queue[tuple[Case, int]] = asyncio.Queue()
            for job in jobs:
                queue.put_nowait(job)
            self._workers = [
                asyncio.create_task(self._work(queue, lanes, header.run_id))
                for _ in range(min(self.options.concurrency, max(1, len(jobs))))
            ]
            results = await asyncio.gather(*self._workers, return_exceptions=True)
            # Threads of attempts cut short (Ctrl-C, a timeout) are still deleted, sandboxes
            # with them, before the channels close.
            await asyncio.gather(*self._deletions, return_exceptions=True)
        for result in results:
            if isinstance(result, LanesExhaustedError):
                self._stop_reason = self._stop_reason or f"aborted: {result}"
            elif isinstance(result, BaseException) and not isinstance(
                result, asyncio.CancelledError
            ):
                raise result
        self.reporter.close()
        return self._report(header)

    def _open_rows(self) -> tuple[Header, list[Row]]:
        print_ = fingerprint(self.cases, self.options.iterations)
        if self.options.resume and self.rows_file.exists():
            try:
                header, rows = self.rows_file.read()
            except RowsFileError as exc:
                raise RunError(str(exc)) from None
            if header.fingerprint != print_:
                raise RunError(
                    f"{self.rows_file.path} belongs to a run of other cases or iterations "
                    f"(changed since it started): run it again without --resume and with "
                    "--overwrite, or use another --report directory"
                )
            known = {case.id for case in self.cases}
            return header, [row for row in rows if row.case in known]
        if self.rows_file.exists() and not self.options.resume and not self.options.overwrite:
            raise RunError(
                f"{self.rows_file.path} already holds a run: pass --resume to continue it, "
                "--overwrite to start again, or choose another --report directory"
            )
        header = Header(
            run_id=uuid.uuid4().hex[:12],
            started_at=datetime.now(UTC),
            fingerprint=print_,
            iterations=self.options.iterations,
            cases=[case.id for case in self.cases],
        )
        self.rows_file.start(header)
        return header, []

    async def _preflight(self, lanes: Lanes) -> None:
        answers = await asyncio.gather(*(lane.client.healthy() for lane in lanes.lanes))
        for lane, healthy in zip(lanes.lanes, answers, strict=True):
            if not healthy:
                await lanes.quarantine(lane, "does not answer at the start")
        if not any(answers):
            raise RunError(
                "cannot reach any server ("
                + ", ".join(lane.address for lane in lanes.lanes)
                + "): is `instance-ai serve` running there (or pass --server)?"
            )

    async def _work(
        self, queue: asyncio.Queue[tuple[Case, int]], lanes: Lanes, run_id: str
    ) -> None:
        # The stop check covers a Ctrl-C that came before the workers existed.
        while not queue.empty() and not self._stop_reason:
            case, iteration = queue.get_nowait()
            row = await self._attempts(case, iteration, lanes, run_id)
            self.rows_file.append(row)
            self._rows.append(row)
            self.reporter.finished(row)

    async def _attempts(self, case: Case, iteration: int, lanes: Lanes, run_id: str) -> Row:
        tried: set[str] = set()
        last_error = ""
        started = time.monotonic()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            lane = await lanes.acquire(tried)
            thread = f"eval-{run_id}-{case.id}-{iteration}-{attempt}"
            transport_failed = False
            try:
                async with asyncio.timeout(self.options.case_timeout):
                    return await run_case(
                        lane.client,
                        case,
                        iteration=iteration,
                        thread=thread,
                        server=lane.address,
                        attempts=attempt,
                    )
            except TransportError as exc:
                transport_failed = True
                tried.add(lane.address)
                last_error = f"{lane.address}: {exc}"
                self.reporter.note(f"{case.id} #{iteration}: {last_error}; trying again")
            except TimeoutError:
                reason = f"timed out after {self.options.case_timeout:.0f} s"
                return self._infrastructure(case, iteration, attempt, lane.address, started, reason)
            except grpc.aio.AioRpcError as exc:
                reason = f"the service answered {exc.code().name}: {exc.details()}"
                return self._infrastructure(case, iteration, attempt, lane.address, started, reason)
            finally:
                await self._delete_thread(lane, thread)
                await lanes.release(lane, transport_failed=transport_failed)
        reason = f"no server completed it in {MAX_ATTEMPTS} attempts; last: {last_error}"
        return self._infrastructure(case, iteration, MAX_ATTEMPTS, "", started, reason)

    async def _delete_thread(self, lane: Lane, thread: str) -> None:
        """Delete the attempt's thread; waited for, unless the attempt itself was cancelled,
        in which case `run` waits for it at the end."""
        deletion = asyncio.ensure_future(_quietly(lane.client.delete_thread(thread)))
        self._deletions.add(deletion)
        deletion.add_done_callback(self._deletions.discard)
        await asyncio.shield(deletion)

    @staticmethod
    def _infrastructure(
        case: Case, iteration: int, attempts: int, server: str, started: float, reason: str
    ) -> Row:
        return Row(
            case=case.id,
            iteration=iteration,
            attempts=attempts,
            server=server,
            duration_ms=int((time.monotonic() - started) * 1000),
            units=failed_units(case, "infrastructure", reason),
        )

    def _report(self, header: Header) -> Outcome:
        rows = sorted(self._rows, key=lambda row: (row.case, row.iteration))
        info = RunInfo(
            run_id=header.run_id,
            started_at=header.started_at,
            finished_at=datetime.now(UTC),
            iterations=self.options.iterations,
            concurrency=self.options.concurrency,
            servers=[config.server for config in self.options.servers],
            complete=not self._stop_reason,
            stop_reason=self._stop_reason,
        )
        document = results_document(info, self.cases, rows, self.problems)
        if self.options.baseline is not None:
            document["comparison"] = compare(self.options.baseline, document)
        write_reports(self.options.report_dir, document)
        return Outcome(document=document, stop_reason=self._stop_reason, rows=rows)


async def _quietly(call: Awaitable[None]) -> None:
    # A server that is gone cannot delete anything; its sandboxes are its janitor's to clear.
    with contextlib.suppress(Exception):
        await call


def load_baseline(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunError(f"--baseline {path}: cannot be read: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("cases"), list):
        raise RunError(f"--baseline {path}: not an eval-results.json (no cases list)")
    return document
