"""The model's pass over a simulation plan, at build.

After the deterministic classifier, one model request decides the nodes no rule decides
(simulate or execute, with a reason) and writes fixtures for the nodes that will be simulated,
from their parameters and the workflow's purpose. The rules still win: only ambiguous nodes
can change verdict (a write stays simulated, a declared output stays declared), and fixtures
are taken only for simulated nodes the source did not declare. A model that fails, runs out
of time or answers outside the schema leaves the deterministic plan, marked (`model_error`)
so that verification says so.

The model is reached through a seam (`AskModel`), which the composition root binds to the
configured provider: this layer knows no provider.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from server.pipeline.simulation import PlanEntry

__all__ = ["ANSWER_SCHEMA", "AskModel", "judge_plan"]

# (instructions, prompt, the JSON Schema of the answer) → the answer object; raises on failure.
AskModel = Callable[[str, str, dict[str, Any]], Awaitable[dict[str, Any]]]

MAX_FIXTURE_ITEMS = 10
MAX_FIXTURE_CHARS = 20_000
MAX_PARAMETER_CHARS = 2_000

INSTRUCTIONS = (
    "You plan a verification run of an n8n workflow. Nodes run for real in a sandbox unless "
    "simulated (pinned with fixture output). Decide each node listed under 'decide': execute "
    "it only when running it cannot change anything outside the workflow (reads, pure "
    "computation); otherwise simulate it. Then write realistic fixture output (a list of "
    "items, each a JSON object shaped like the node's real output) for every node listed "
    "under 'fixtures' and every node you decide to simulate. Answer only with the answer tool."
)
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decisions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "nodeName": {"type": "string"},
                    "verdict": {"type": "string", "enum": ["simulate", "execute"]},
                    "reason": {"type": "string"},
                },
                "required": ["nodeName", "verdict", "reason"],
            },
        },
        "fixtures": {
            "type": "object",
            "description": "Node name → the items it outputs",
            "additionalProperties": {"type": "array", "items": {"type": "object"}},
        },
    },
    "required": ["decisions", "fixtures"],
}


class _Decision(BaseModel):
    model_config = ConfigDict(extra="ignore")

    node_name: str = Field(alias="nodeName", min_length=1)
    verdict: Literal["simulate", "execute"]
    reason: str = Field(min_length=1, max_length=500)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    decisions: list[_Decision]
    fixtures: dict[str, list[dict[str, Any]]]


async def judge_plan(
    ask: AskModel,
    workflow: dict[str, Any],
    plan: list[PlanEntry],
    *,
    declared: set[str],
    timeout_s: float,
) -> list[PlanEntry]:
    """The plan with the model's decisions and fixtures (unchanged when there is nothing to
    ask; marked with the reason when the model could not be used)."""
    ambiguous = [e for e in plan if e.source == "fallback"]
    wanting = [e for e in plan if e.verdict == "simulate" and e.node_name not in declared]
    if not ambiguous and not wanting:
        return plan
    try:
        raw = await asyncio.wait_for(
            ask(INSTRUCTIONS, _prompt(workflow, ambiguous, wanting), ANSWER_SCHEMA), timeout_s
        )
        answer = _Answer.model_validate(raw)
    except TimeoutError:
        return _marked(plan, f"the model did not answer within {timeout_s:g} s")
    except ValidationError as exc:
        return _marked(plan, f"the model's answer did not fit the schema ({exc.error_count()})")
    except Exception as exc:  # the provider's own errors: the deterministic plan stands
        return _marked(plan, f"the model could not be asked ({exc})")
    decisions = {d.node_name: d for d in answer.decisions}
    judged: list[PlanEntry] = []
    for entry in plan:
        decision = decisions.get(entry.node_name)
        if entry.source == "fallback" and decision is not None:
            entry = PlanEntry(
                node_name=entry.node_name,
                verdict=decision.verdict,
                reason=f"the model judged: {decision.reason}",
                confidence="medium",
                source="model",
            )
        items = answer.fixtures.get(entry.node_name)
        if entry.verdict == "simulate" and entry.node_name not in declared and _usable(items):
            entry = dataclasses.replace(entry, fixture=items)
        judged.append(entry)
    return judged


def _usable(items: list[dict[str, Any]] | None) -> bool:
    return (
        bool(items)
        and len(items or []) <= MAX_FIXTURE_ITEMS
        and len(json.dumps(items)) <= MAX_FIXTURE_CHARS
    )


def _marked(plan: list[PlanEntry], error: str) -> list[PlanEntry]:
    return [
        dataclasses.replace(e, model_error=error) if e.source == "fallback" else e for e in plan
    ]


def _prompt(workflow: dict[str, Any], ambiguous: list[PlanEntry], wanting: list[PlanEntry]) -> str:
    nodes = [
        {
            "name": n.get("name"),
            "type": n.get("type"),
            "typeVersion": n.get("typeVersion"),
            "parameters": json.dumps(n.get("parameters") or {})[:MAX_PARAMETER_CHARS],
        }
        for n in workflow.get("nodes") or []
        if isinstance(n, dict)
    ]
    return json.dumps(
        {
            "workflow": workflow.get("name"),
            "nodes": nodes,
            "connections": workflow.get("connections") or {},
            "decide": [{"nodeName": e.node_name, "why": e.reason} for e in ambiguous],
            "fixtures": [e.node_name for e in wanting],
        }
    )
