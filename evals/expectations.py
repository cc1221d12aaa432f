"""Checking a scenario's expectations against a verification result and the nodes' outputs.

Pure functions: the caller fetches the outputs the assertions read (`nodes_read`) and passes
them in, so the rules can be tested without a server.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evals.cases import CLAIM_LEVELS, Diagnostic, Expectations, OutputAssertion

__all__ = [
    "NodeOutputs",
    "diagnostic_problems",
    "mismatches",
    "nodes_read",
    "output_problem",
    "resolve_pointer",
    "run_problem",
]

# A node's items per output (index = output), as `get-node-output` returns them.
NodeOutputs = dict[str, list[list[Any]]]

_MISSING = object()


def nodes_read(expect: Expectations) -> list[str]:
    return sorted({assertion.node for assertion in expect.outputs})


def run_problem(expect: Expectations, result: dict[str, Any]) -> str | None:
    """Why the run itself went other than expected (a verification failure), or None."""
    if result.get("status") == "not_run":
        return f"verification did not run: {result.get('guidance', 'no reason given')}"
    if expect.success and not result.get("success"):
        where = result.get("failedNodeName")
        error = result.get("error") or (result.get("remediation") or {}).get("guidance", "")
        return f"the run failed{f' at {where!r}' if where else ''}: {error}".strip()
    return None


def mismatches(expect: Expectations, result: dict[str, Any], outputs: NodeOutputs) -> list[str]:
    """Each expectation the run did not meet, in words; empty when all are met."""
    found: list[str] = []
    if not expect.success and result.get("success"):
        found.append("the run succeeded, but the scenario expects it to fail")
    claim = str((result.get("claim") or {}).get("level", "failed"))
    if expect.claim_at_least and _rank(claim) < _rank(expect.claim_at_least):
        found.append(f"claim is {claim}, expected at least {expect.claim_at_least}")
    reached = _reached(result)
    simulated = set(result.get("simulatedNodes") or [])
    found += [f"node {n!r} was not reached" for n in expect.reached if n not in reached]
    found += [f"node {n!r} was reached, expected not" for n in expect.not_reached if n in reached]
    found += [f"node {n!r} was not simulated" for n in expect.simulated if n not in simulated]
    found += [
        f"node {n!r} was simulated, expected a real run"
        for n in expect.not_simulated
        if n in simulated
    ]
    for assertion in expect.outputs:
        problem = output_problem(assertion, outputs.get(assertion.node))
        if problem:
            found.append(problem)
    return found


def output_problem(assertion: OutputAssertion, node_outputs: list[list[Any]] | None) -> str | None:
    where = f"{assertion.node}[{assertion.output}]{assertion.pointer}"
    if node_outputs is None:
        return f"{where}: node {assertion.node!r} produced no output (it did not run)"
    items: list[Any] = (
        node_outputs[assertion.output] if assertion.output < len(node_outputs) else []
    )
    value = resolve_pointer(items, assertion.pointer)
    if value is _MISSING:
        return f"{where}: nothing at this pointer (output has {len(items)} item(s))"
    check = assertion.check
    if check == "equals":
        ok = _same(value, assertion.equals)
        wanted = f"equal {_show(assertion.equals)}"
    elif check == "contains":
        ok = _contains(value, assertion.contains)
        wanted = f"contain {_show(assertion.contains)}"
    elif check == "matches":
        ok = isinstance(value, str) and re.search(assertion.matches or "", value) is not None
        wanted = f"match /{assertion.matches}/"
    else:
        ok = isinstance(value, list | dict | str) and len(value) == assertion.count
        wanted = f"have {assertion.count} element(s)"
    return None if ok else f"{where}: expected to {wanted}, got {_show(value)}"


def diagnostic_problems(expected: list[Diagnostic], errors: list[dict[str, Any]]) -> list[str]:
    """Expected build diagnostics that no reported error matches."""
    missing = [d for d in expected if not any(_diagnostic_matches(d, e) for e in errors)]
    if not missing:
        return []
    got = "; ".join(f"{e.get('code', '')} {e.get('message', '')}"[:160] for e in errors[:3])
    return [f"expected a build error {_describe(d)}, got: {got or 'no errors'}" for d in missing]


def resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901; `_MISSING` when the path does not exist."""
    if pointer == "":
        return document
    current = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        elif isinstance(current, dict) and token in current:
            current = current[token]
        else:
            return _MISSING
    return current


def _rank(level: str) -> int:
    return CLAIM_LEVELS.index(level) if level in CLAIM_LEVELS else -1


def _reached(result: dict[str, Any]) -> set[str]:
    return {str(p["nodeName"]) for p in result.get("nodePreviews") or []}


def _same(value: Any, wanted: Any) -> bool:
    # Numbers come back through protobuf Structs as floats: 3 and 3.0 are the same answer.
    if isinstance(value, bool) or isinstance(wanted, bool):
        return type(value) is type(wanted) and value == wanted
    if isinstance(value, int | float) and isinstance(wanted, int | float):
        return float(value) == float(wanted)
    if isinstance(value, list) and isinstance(wanted, list):
        return len(value) == len(wanted) and all(map(_same, value, wanted))
    if isinstance(value, dict) and isinstance(wanted, dict):
        return value.keys() == wanted.keys() and all(_same(value[k], wanted[k]) for k in value)
    return bool(value == wanted)


def _contains(value: Any, wanted: Any) -> bool:
    """A substring of a string, an element of a list, or a sub-mapping of a mapping."""
    if isinstance(value, str):
        return isinstance(wanted, str) and wanted in value
    if isinstance(value, list):
        return any(_same(element, wanted) or _contains(element, wanted) for element in value)
    if isinstance(value, dict) and isinstance(wanted, dict):
        return all(k in value and _same(value[k], v) for k, v in wanted.items())
    return False


def _diagnostic_matches(expected: Diagnostic, error: dict[str, Any]) -> bool:
    message = str(error.get("message", ""))
    return (
        (expected.code is None or error.get("code") == expected.code)
        and (expected.source is None or error.get("source") == expected.source)
        and (expected.node is None or error.get("nodeName") == expected.node)
        and (expected.message_contains is None or expected.message_contains in message)
    )


def _describe(expected: Diagnostic) -> str:
    return ", ".join(
        f"{name}={value!r}"
        for name, value in expected.model_dump(by_alias=True, exclude_none=True).items()
    )


def _show(value: Any) -> str:
    if value is _MISSING:
        return "nothing"
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
