"""One attempt at one case iteration on one server, in a fresh thread: build (or converse),
verify each scenario, and score it. The runner deletes the thread afterwards.

Transport failures propagate (`TransportError`): the runner decides whether to try another
server. Everything else ends as a row: a scored outcome per unit, with a category and reason.
"""

from __future__ import annotations

import time
from typing import Any

import grpc

from evals.cases import Case, PromptCase, Scenario
from evals.client import EvalClient
from evals.errors import NoModelError
from evals.expectations import (
    diagnostic_problems,
    mismatches,
    nodes_read,
    run_problem,
)
from evals.rows import BuildSummary, Category, Row, UnitResult

__all__ = ["failed_units", "run_case"]


async def run_case(
    client: EvalClient, case: Case, *, iteration: int, thread: str, server: str, attempts: int
) -> Row:
    started = time.monotonic()
    build, units = await _evaluate(client, case, thread)
    return Row(
        case=case.id,
        iteration=iteration,
        attempts=attempts,
        server=server,
        duration_ms=_ms_since(started),
        build=build,
        units=units,
    )


def failed_units(case: Case, category: Category, reason: str) -> list[UnitResult]:
    """Every unit of the case, failed for one reason (the build, a timeout, no model...)."""
    return [
        UnitResult(name=name, passed=False, category=category, reason=reason) for name in case.units
    ]


async def _evaluate(
    client: EvalClient, case: Case, thread: str
) -> tuple[BuildSummary | None, list[UnitResult]]:
    if isinstance(case.spec, PromptCase):
        built = await _converse(client, case.spec, thread)
        if isinstance(built, list):
            return None, built
        build = BuildSummary(success=True, workflow_id=built)
    else:
        build = await _build(client, case, thread)
        if not case.spec.build.succeeds:
            return build, [_must_not_build(case, build)]
        if not build.success:
            return build, failed_units(case, "build_failure", _build_reason(build))
    assert build.workflow_id is not None
    units = [await _scenario(client, thread, build.workflow_id, s) for s in case.spec.scenarios]
    return build, units


async def _build(client: EvalClient, case: Case, thread: str) -> BuildSummary:
    assert case.source is not None
    await client.write_file(thread, case.source_name, case.source)
    reply = await client.build(thread, case.source_name)
    return BuildSummary(
        success=bool(reply.get("success")),
        workflow_id=reply.get("workflowId") or None,
        errors=list(reply.get("errors") or []),
    )


def _must_not_build(case: Case, build: BuildSummary) -> UnitResult:
    if build.success:
        return UnitResult(
            name="build",
            passed=False,
            category="expectation_mismatch",
            reason="the build succeeded, but this source must fail to build",
        )
    problems = diagnostic_problems(case.spec.build.diagnostics, build.errors)
    return UnitResult(
        name="build",
        passed=not problems,
        category="expectation_mismatch" if problems else None,
        reason="; ".join(problems),
    )


def _build_reason(build: BuildSummary) -> str:
    shown = [
        f"{e.get('code') or e.get('source', '')}: {e.get('message', '')}"[:200]
        for e in build.errors[:3]
    ]
    return "the build failed: " + ("; ".join(shown) or "no errors reported")


async def _converse(client: EvalClient, spec: PromptCase, thread: str) -> str | list[UnitResult]:
    """The workflow the agent built last, or the failed units when it built none."""
    units = [s.name for s in spec.scenarios]
    try:
        said = await client.converse(thread, spec.user_turns)
    except NoModelError as exc:
        return [
            UnitResult(name=n, passed=False, category="not_run", reason=f"not run: {exc}")
            for n in units
        ]
    if said.built_workflow_ids:
        return said.built_workflow_ids[-1]
    statuses = ", ".join(said.run_statuses) or "none"
    detail = f"; errors: {'; '.join(said.errors)[:300]}" if said.errors else ""
    reason = f"the agent built no workflow (runs: {statuses}){detail}"
    return [
        UnitResult(name=n, passed=False, category="build_failure", reason=reason) for n in units
    ]


async def _scenario(
    client: EvalClient, thread: str, workflow_id: str, scenario: Scenario
) -> UnitResult:
    started = time.monotonic()

    def outcome(category: Category | None, reason: str, claim: str | None) -> UnitResult:
        return UnitResult(
            name=scenario.name,
            passed=category is None,
            category=category,
            reason=reason,
            claim=claim,
            duration_ms=_ms_since(started),
        )

    try:
        result = await client.verify(
            thread,
            workflow_id,
            input_data=scenario.input,
            trigger=scenario.trigger,
            fixtures=scenario.fixtures,
        )
    except grpc.aio.AioRpcError as exc:
        # The service refused the request (e.g. an unknown trigger node): the case is wrong.
        return outcome("verification_failure", f"{exc.code().name}: {exc.details()}", None)
    claim = (result.get("claim") or {}).get("level")
    problem = run_problem(scenario.expect, result)
    if problem:
        return outcome("verification_failure", problem, claim)
    outputs: dict[str, list[list[Any]]] = {}
    for node in nodes_read(scenario.expect):
        found = await client.node_output(thread, list(result.get("executionIds") or []), node)
        if found is not None:
            outputs[node] = found
    found_mismatches = mismatches(scenario.expect, result, outputs)
    if found_mismatches:
        return outcome("expectation_mismatch", "; ".join(found_mismatches), claim)
    return outcome(None, "", claim)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
