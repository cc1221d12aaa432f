"""Deterministic fixtures for simulated nodes: what a verification run pins in place of a node
it must not execute, when neither the source declared one nor a model wrote one.

- Declared fixtures win.
- Otherwise an example built from the JSON Schema n8n-nodes-base ships for the node's output
  (same schema, same example: runs are repeatable), with dates at one anchor.
- Form pages emit their fields and `submittedAt`; Wait nodes pass through the nearest simulated
  ancestor's items (up to 5 hops back).
- Every simulated node gets at least one item: an empty list would silently stop everything
  downstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.pipeline.simulation import BASE

__all__ = [
    "DATE_ANCHOR",
    "FORM",
    "MAX_DEPTH",
    "MAX_PASS_THROUGH_HOPS",
    "PASS_THROUGH",
    "example",
    "simulation_fixtures",
]

DATE_ANCHOR = "2026-01-15T09:30:00.000Z"
MAX_DEPTH = 6
MAX_PASS_THROUGH_HOPS = 5
PASS_THROUGH = {BASE + "wait"}
FORM = BASE + "form"


def example(schema: Mapping[str, Any] | None, name: str = "value", depth: int = 0) -> Any:
    """A deterministic value matching `schema` (JSON Schema), named after its field."""
    if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties") or {}
        return {key: example(value, key, depth + 1) for key, value in properties.items()}
    if kind == "array":
        items = schema.get("items")
        return [example(items, name, depth + 1)] if isinstance(items, Mapping) else []
    if kind == "string":
        if schema.get("format") in ("date-time", "date") or name.lower().endswith(("at", "date")):
            return DATE_ANCHOR
        return f"example {name}"
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    return None


def _parents(workflow: Mapping[str, Any]) -> dict[str, list[str]]:
    parents: dict[str, list[str]] = {}
    for source, outputs in (workflow.get("connections") or {}).items():
        for slot in (outputs or {}).get("main") or []:
            for connection in slot or []:
                parents.setdefault(str(connection["node"]), []).append(source)
    return parents


def _form_item(node: Mapping[str, Any]) -> dict[str, Any]:
    fields = ((node.get("parameters") or {}).get("formFields") or {}).get("values") or []
    item: dict[str, Any] = {
        str(field.get("fieldLabel") or f"field {n}"): f"example {field.get('fieldLabel', n)}"
        for n, field in enumerate(fields, 1)
        if isinstance(field, Mapping)
    }
    return {**item, "submittedAt": DATE_ANCHOR}


def simulation_fixtures(
    workflow: Mapping[str, Any],
    simulated: list[str],
    *,
    declared: Mapping[str, list[Any]],
    schemas: Mapping[str, Mapping[str, Any] | None],
) -> dict[str, list[Any]]:
    """Pin data for every simulated node, by node name."""
    nodes = {str(n["name"]): n for n in workflow.get("nodes") or [] if isinstance(n, Mapping)}
    parents = _parents(workflow)
    fixtures: dict[str, list[Any]] = {}
    pass_through = []
    for name in simulated:
        node = nodes.get(name, {})
        if declared.get(name):
            fixtures[name] = list(declared[name])
        elif node.get("type") == FORM:
            fixtures[name] = [_form_item(node)]
        elif node.get("type") in PASS_THROUGH:
            pass_through.append(name)
        else:
            built = example(schemas.get(name))
            fixtures[name] = [built if isinstance(built, dict) and built else {}]
    for name in pass_through:  # after the others: they copy an ancestor's fixture
        fixtures[name] = _nearest_ancestor_items(name, parents, fixtures) or [{}]
    return fixtures


def _nearest_ancestor_items(
    name: str, parents: Mapping[str, list[str]], fixtures: Mapping[str, list[Any]]
) -> list[Any] | None:
    frontier = [name]
    seen = {name}
    for _hop in range(MAX_PASS_THROUGH_HOPS):
        frontier = [p for node in frontier for p in parents.get(node, []) if p not in seen]
        seen.update(frontier)
        for parent in frontier:
            if fixtures.get(parent):
                return list(fixtures[parent])
    return None
