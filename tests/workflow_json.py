"""WorkflowJSON pieces for tests that write a workflow source as JSON."""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["chain", "node"]

# The versions the tests use, per n8n-nodes-base type (others: 1).
VERSIONS = {"httpRequest": 4.2, "slack": 2.3, "set": 3.4, "wait": 1.1}


def node(name: str, type_: str, x: int = 0, **parameters: Any) -> dict[str, Any]:
    """An n8n-nodes-base node at (x, 0)."""
    return {
        "name": name,
        "type": f"n8n-nodes-base.{type_}",
        "typeVersion": VERSIONS.get(type_, 1),
        "position": [x, 0],
        "parameters": parameters,
    }


def chain(*names: str) -> dict[str, Any]:
    """Connections running the named nodes one after another."""
    return {
        a: {"main": [[{"node": b, "type": "main", "index": 0}]]}
        for a, b in itertools.pairwise(names)
    }
