"""Evaluation case files: one YAML or JSON file per case, its id the file name.

Two kinds. A *source case* carries a workflow source (inline, or a file beside the case) that
the service must build, then verify once per scenario. A *prompt case* carries a conversation
the agent must turn into a workflow; its scenarios then verify what the agent built. The format
is documented in `docs/evals.md`; every field is checked here, and a bad file is reported with
its path and the field at fault while the other cases still run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "ASSERTIONS",
    "CASE_SUFFIXES",
    "CLAIM_LEVELS",
    "BuildExpectation",
    "Case",
    "CaseProblem",
    "Claim",
    "Diagnostic",
    "Expectations",
    "Loaded",
    "OutputAssertion",
    "PromptCase",
    "Scenario",
    "SourceCase",
    "Turn",
    "case_files",
    "is_stage_direction",
    "load_case",
    "load_cases",
]

CASE_SUFFIXES = (".yaml", ".yml", ".json")
CLAIM_LEVELS = ("failed", "unproven", "partial", "verified")
Claim = Literal["failed", "unproven", "partial", "verified"]
ASSERTIONS = ("equals", "contains", "matches", "count")


class _Strict(BaseModel):
    # A misspelt field is an error, not silently ignored: a typo must not weaken a case.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class OutputAssertion(_Strict):
    """One check on what a node produced: the items of one of its outputs, read at a JSON
    pointer (RFC 6901; "" is the whole item list, "/0/total" the first item's `total`)."""

    node: str = Field(min_length=1)
    output: int = Field(0, ge=0)
    pointer: str = ""
    equals: Any = None
    contains: Any = None
    matches: str | None = None
    count: int | None = Field(None, ge=0)

    @field_validator("pointer")
    @classmethod
    def _pointer(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError('a JSON pointer is "" or starts with "/", e.g. "/0/total"')
        return value

    @field_validator("matches")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_check(self) -> OutputAssertion:
        given = [name for name in ASSERTIONS if name in self.model_fields_set]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of {', '.join(ASSERTIONS)} (found: {', '.join(given) or 'none'})"
            )
        return self

    @property
    def check(self) -> str:
        return next(name for name in ASSERTIONS if name in self.model_fields_set)


class Expectations(_Strict):
    success: bool = Field(True, description="the verification run succeeds")
    claim_at_least: Claim | None = Field(None, alias="claimAtLeast")
    reached: list[str] = []
    not_reached: list[str] = Field([], alias="notReached")
    simulated: list[str] = []
    not_simulated: list[str] = Field([], alias="notSimulated")
    outputs: list[OutputAssertion] = []


class Scenario(_Strict):
    name: str = Field(min_length=1, max_length=120)
    description: str = ""
    trigger: str | None = Field(None, min_length=1, description="trigger node; default: each")
    input: Any = None
    fixtures: dict[str, list[dict[str, Any]]] = {}
    expect: Expectations = Expectations()


class Diagnostic(_Strict):
    """A build error the case expects; each given field must match the same error."""

    code: str | None = None
    source: str | None = None
    node: str | None = None
    message_contains: str | None = Field(None, alias="messageContains")

    @model_validator(mode="after")
    def _something(self) -> Diagnostic:
        if not self.model_fields_set:
            raise ValueError("give at least one of code, source, node, messageContains")
        return self


class BuildExpectation(_Strict):
    succeeds: bool = True
    diagnostics: list[Diagnostic] = []


class _CaseBase(_Strict):
    title: str = Field(min_length=1)
    description: str = ""
    tags: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]] = []
    complexity: Literal["simple", "medium", "complex"] = "simple"
    build: BuildExpectation = BuildExpectation()
    scenarios: list[Scenario] = []

    @model_validator(mode="after")
    def _units(self) -> _CaseBase:
        names = [s.name for s in self.scenarios]
        if len(set(names)) != len(names):
            raise ValueError("scenario names must be unique within a case")
        if self.build.succeeds and not self.scenarios:
            raise ValueError("a case whose build succeeds needs at least one scenario")
        if not self.build.succeeds and (self.scenarios or not self.build.diagnostics):
            raise ValueError(
                "a case whose build must fail has no scenarios and lists the diagnostics "
                "it expects (build.diagnostics)"
            )
        return self


class SourceCase(_CaseBase):
    kind: Literal["source"] = "source"
    source: str | None = Field(None, min_length=1, description="the workflow source, inline")
    source_file: str | None = Field(
        None, alias="sourceFile", min_length=1, description="or a file, relative to the case"
    )

    @model_validator(mode="after")
    def _one_source(self) -> SourceCase:
        if (self.source is None) == (self.source_file is None):
            raise ValueError("give exactly one of source (inline) or sourceFile")
        return self


class Turn(_Strict):
    role: Literal["user"] = "user"
    text: str | list[str]

    @property
    def lines(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)


class PromptCase(_CaseBase):
    kind: Literal["prompt"] = "prompt"
    conversation: list[Turn | str] = Field(min_length=1)

    @property
    def user_turns(self) -> list[str]:
        """What the user says, in order; a `[...]` line is a stage direction for whoever plays
        the user, never sent to the agent."""
        said: list[str] = []
        for turn in self.conversation:
            lines = [turn] if isinstance(turn, str) else turn.lines
            text = "\n".join(line for line in lines if not is_stage_direction(line)).strip()
            if text:
                said.append(text)
        return said

    @model_validator(mode="after")
    def _says_something(self) -> PromptCase:
        if not self.user_turns:
            raise ValueError("the conversation has no user turn to send (only stage directions)")
        return self


def is_stage_direction(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("[") and stripped.endswith("]")


@dataclass(frozen=True, kw_only=True)
class Case:
    id: str
    path: Path
    spec: SourceCase | PromptCase
    # The workflow source of a source case (read from sourceFile when given).
    source: str | None
    # Hash of everything the case's result depends on: a resumed run refuses changed cases.
    digest: str

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def units(self) -> list[str]:
        """What is scored: each scenario, or the build itself for a case that must not build."""
        return [s.name for s in self.spec.scenarios] or ["build"]

    @property
    def source_name(self) -> str:
        suffix = ".json" if self.source and self.source.lstrip().startswith("{") else ".ts"
        base = ".workflow" if suffix == ".ts" else ""
        return f"src/{self.id}{base}{suffix}"


@dataclass(frozen=True, kw_only=True)
class CaseProblem:
    path: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        return f"{self.path}{where}: {self.message}"

    def as_json(self) -> dict[str, str]:
        return {"path": self.path, "field": self.field, "message": self.message}


@dataclass(frozen=True)
class Loaded:
    cases: list[Case]
    problems: list[CaseProblem]


def case_files(paths: Iterable[Path]) -> tuple[list[Path], list[CaseProblem]]:
    """The case files named or found (recursively, sorted) under the given paths."""
    found: list[Path] = []
    problems: list[CaseProblem] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in CASE_SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            problems.append(CaseProblem(path=str(path), field="", message="no such file"))
    return found, problems


def load_cases(paths: Iterable[Path]) -> Loaded:
    files, problems = case_files(paths)
    cases: list[Case] = []
    seen: dict[str, Path] = {}
    for file in files:
        case_id = file.name.rsplit(".", 1)[0]
        if case_id in seen:
            problems.append(
                CaseProblem(
                    path=str(file), field="", message=f"case id {case_id!r} is also {seen[case_id]}"
                )
            )
            continue
        loaded = load_case(file)
        if isinstance(loaded, Case):
            seen[case_id] = file
            cases.append(loaded)
        else:
            problems += loaded
    return Loaded(cases=cases, problems=problems)


def load_case(file: Path) -> Case | list[CaseProblem]:
    case_id = file.name.rsplit(".", 1)[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}", case_id):
        return [_problem(file, "", "the file name is the case id: use letters, digits, . _ -")]
    if file.suffix not in CASE_SUFFIXES:
        return [_problem(file, "", f"a case file ends in {', '.join(CASE_SUFFIXES)}")]
    try:
        raw_text = file.read_text()
        data = json.loads(raw_text) if file.suffix == ".json" else yaml.safe_load(raw_text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        return [_problem(file, "", f"cannot be read: {exc}")]
    if not isinstance(data, dict):
        return [_problem(file, "", "a case is a mapping of fields (title, scenarios, ...)")]
    model = PromptCase if "conversation" in data else SourceCase
    try:
        spec = model.model_validate(data)
    except ValidationError as exc:
        return [
            _problem(file, ".".join(str(part) for part in error["loc"]), error["msg"])
            for error in exc.errors()
        ]
    source = spec.source if isinstance(spec, SourceCase) else None
    if isinstance(spec, SourceCase) and spec.source_file is not None:
        try:
            source = (file.parent / spec.source_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            return [_problem(file, "sourceFile", f"cannot be read: {exc}")]
    digest = hashlib.sha256(
        json.dumps([case_id, raw_text, source], sort_keys=True).encode()
    ).hexdigest()
    return Case(id=case_id, path=file, spec=spec, source=source, digest=digest)


def _problem(file: Path, field: str, message: str) -> CaseProblem:
    return CaseProblem(path=str(file), field=field, message=message)
