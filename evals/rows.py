"""The rows file (`eval-rows.jsonl`): one JSON line per finished case iteration, appended and
flushed the moment it finishes, after a header line naming the run it belongs to. A crashed or
interrupted run resumes from it; the reports are computed from it alone."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evals.errors import RowsFileError

__all__ = [
    "CATEGORIES",
    "ROWS_FILE",
    "BuildSummary",
    "Category",
    "Header",
    "Row",
    "RowsFile",
    "UnitResult",
]

ROWS_FILE = "eval-rows.jsonl"

Category = Literal[
    "build_failure", "verification_failure", "expectation_mismatch", "infrastructure", "not_run"
]
CATEGORIES: tuple[Category, ...] = (
    "build_failure",
    "verification_failure",
    "expectation_mismatch",
    "infrastructure",
    "not_run",
)


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)


class UnitResult(_Model):
    """One scenario (or a must-fail build) in one iteration."""

    name: str
    passed: bool
    category: Category | None = None
    reason: str = ""
    claim: str | None = None
    duration_ms: int = Field(0, alias="durationMs")


class BuildSummary(_Model):
    success: bool
    workflow_id: str | None = Field(None, alias="workflowId")
    errors: list[dict[str, Any]] = []


class Row(_Model):
    kind: Literal["row"] = "row"
    case: str
    iteration: int
    attempts: int = 1
    server: str = ""
    duration_ms: int = Field(0, alias="durationMs")
    build: BuildSummary | None = None
    units: list[UnitResult]

    @property
    def status(self) -> str:
        categories = {u.category for u in self.units if not u.passed}
        if not categories:
            return "passed"
        for status in ("not_run", "infrastructure"):
            if status in categories:
                return status
        return "failed"


class Header(_Model):
    kind: Literal["header"] = "header"
    run_id: str = Field(alias="runId")
    started_at: datetime = Field(alias="startedAt")
    fingerprint: str
    iterations: int
    cases: list[str]


class RowsFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def exists(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def read(self) -> tuple[Header, list[Row]]:
        """The header and the complete rows; a torn line (a crash mid-write) is dropped, and a
        later row for the same case iteration wins."""
        lines = self.path.read_text().splitlines()
        try:
            header = Header.model_validate_json(lines[0])
        except (IndexError, ValidationError) as exc:
            raise RowsFileError(f"{self.path} does not start with a run header: {exc}") from None
        rows: dict[tuple[str, int], Row] = {}
        for number, line in enumerate(lines[1:], start=2):
            try:
                value = json.loads(line)
            except ValueError:
                continue  # torn by a crash: that iteration simply runs again
            try:
                row = Row.model_validate(value)
            except ValidationError:
                raise RowsFileError(f"{self.path}:{number} is not a row of a run") from None
            rows[(row.case, row.iteration)] = row
        return header, list(rows.values())

    def start(self, header: Header) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(_line(header.model_dump(mode="json", by_alias=True)))

    def append(self, row: Row) -> None:
        # A torn line left by a crash gets a newline first, so the new row stands alone.
        with self.path.open("a+") as file:
            file.seek(0, os.SEEK_END)
            if file.tell() and not _ends_with_newline(self.path):
                file.write("\n")
            file.write(_line(row.model_dump(mode="json", by_alias=True)))
            file.flush()
            os.fsync(file.fileno())


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True) + "\n"
