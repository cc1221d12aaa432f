"""Deterministic fixtures for simulated nodes."""

from __future__ import annotations

from typing import Any

from server.pipeline.fixtures import DATE_ANCHOR, example, simulation_fixtures

SCHEMA = {
    "type": "object",
    "properties": {
        "channel": {"type": "string"},
        "ts": {"type": "string"},
        "ok": {"type": "boolean"},
        "count": {"type": ["null", "integer"]},
        "createdAt": {"type": "string"},
        "kind": {"type": "string", "enum": ["message", "reply"]},
        "blocks": {"type": "array", "items": {"type": "object", "properties": {"id": {}}}},
        "tags": {"type": "array"},
    },
}


def test_an_example_follows_the_schema_and_is_the_same_every_time() -> None:
    built = example(SCHEMA)
    assert built == {
        "channel": "example channel",
        "ts": "example ts",
        "ok": True,
        "count": 1,
        "createdAt": DATE_ANCHOR,
        "kind": "message",
        "blocks": [{"id": None}],
        "tags": [],
    }
    assert example(SCHEMA) == built


def node(name: str, type_: str, **parameters: Any) -> dict[str, Any]:
    return {"name": name, "type": f"n8n-nodes-base.{type_}", "parameters": parameters}


def test_every_simulated_node_gets_at_least_one_item() -> None:
    form = node(
        "Ask",
        "form",
        formFields={"values": [{"fieldLabel": "Email"}, {"fieldLabel": "Reason"}]},
    )
    workflow = {
        "nodes": [
            node("Start", "manualTrigger"),
            node("Post", "slack"),
            node("Hold", "wait"),
            node("Hold Again", "wait"),
            form,
            node("Unknown", "someNode"),
            node("Declared", "gmail"),
        ],
        "connections": {
            "Start": {"main": [[{"node": "Post"}]]},
            "Post": {"main": [[{"node": "Hold"}]]},
            "Hold": {"main": [[{"node": "Hold Again"}]]},
        },
    }
    fixtures = simulation_fixtures(
        workflow,
        ["Post", "Hold", "Hold Again", "Ask", "Unknown", "Declared"],
        declared={"Declared": [{"id": "m-1"}]},
        schemas={"Post": SCHEMA},
    )
    assert fixtures["Declared"] == [{"id": "m-1"}]  # declared wins
    assert fixtures["Post"] == [example(SCHEMA)]
    # Waits pass the nearest simulated ancestor's items through.
    assert fixtures["Hold"] == fixtures["Post"] and fixtures["Hold Again"] == fixtures["Post"]
    assert fixtures["Ask"] == [
        {"Email": "example Email", "Reason": "example Reason", "submittedAt": DATE_ANCHOR}
    ]
    assert fixtures["Unknown"] == [{}]  # no schema: still one item
