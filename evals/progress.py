"""Showing a run as it goes: a live bar for people (counts, rate, ETA), or JSON lines for
machines (`--json`), one object per event on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from evals.rows import Row

__all__ = ["JsonLines", "LiveBar", "Reporter"]


class Reporter(Protocol):
    def started(self, total: int, done: int) -> None: ...
    def finished(self, row: Row) -> None: ...
    def note(self, message: str) -> None: ...
    def close(self) -> None: ...


class JsonLines:
    def __init__(self) -> None:
        self._total = 0
        self._done = 0

    def _emit(self, event: str, **fields: Any) -> None:
        sys.stdout.write(json.dumps({"event": event, **fields}, default=str) + "\n")
        sys.stdout.flush()

    def started(self, total: int, done: int) -> None:
        self._total, self._done = total, done
        self._emit("start", total=total, alreadyDone=done)

    def finished(self, row: Row) -> None:
        self._done += 1
        self._emit(
            "case",
            case=row.case,
            iteration=row.iteration,
            status=row.status,
            durationMs=row.duration_ms,
            server=row.server,
            done=self._done,
            total=self._total,
        )

    def note(self, message: str) -> None:
        self._emit("note", message=message)

    def close(self) -> None:
        pass


class LiveBar:
    def __init__(self, console: Console) -> None:
        self._console = console
        self._counts = {"passed": 0, "failed": 0, "infrastructure": 0, "not_run": 0}
        self._progress = Progress(
            TextColumn("[bold]eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task("eval", total=None, counts="", rate="")

    def started(self, total: int, done: int) -> None:
        self._progress.start()
        self._progress.update(self._task, total=total + done, completed=done, counts=self._text())

    def finished(self, row: Row) -> None:
        self._counts[row.status] = self._counts.get(row.status, 0) + 1
        self._progress.advance(self._task)
        task = self._progress.tasks[0]
        per_minute = (task.speed or 0.0) * 60
        self._progress.update(
            self._task, counts=self._text(), rate=f"{per_minute:.1f}/min" if per_minute else ""
        )
        if row.status != "passed":
            failed = next((u for u in row.units if not u.passed), None)
            reason = f"{failed.name}: {failed.reason}"[:160] if failed else ""
            self._console.print(
                f"  {row.status:<14} {row.case} #{row.iteration} {reason}", markup=False
            )

    def note(self, message: str) -> None:
        self._console.print(f"  note: {message}", markup=False, style="yellow")

    def close(self) -> None:
        self._progress.stop()

    def _text(self) -> str:
        c = self._counts
        return (
            f"[green]{c['passed']} passed[/] [red]{c['failed']} failed[/] "
            f"[red]{c['infrastructure']} infra[/] [yellow]{c['not_run']} not run[/]"
        )
