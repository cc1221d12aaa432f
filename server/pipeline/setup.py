"""What a saved workflow still needs from a person before it can run for real: credentials
its nodes require (or reference but that do not exist) and parameters left as SDK
placeholders (`<__PLACEHOLDER_VALUE__hint__>`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from server.catalog.catalog import Catalog

__all__ = ["PLACEHOLDER", "NodeSetup", "needed"]

PLACEHOLDER = re.compile(r"<__PLACEHOLDER_VALUE__([\s\S]*?)__>")


@dataclass(kw_only=True)
class NodeSetup:
    node_name: str
    node_type: str
    credential_types: list[str] = field(default_factory=list)
    # Dotted parameter path → the hint the placeholder carries.
    parameters: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, value: dict[str, Any]) -> NodeSetup:
        return cls(
            node_name=value["nodeName"],
            node_type=value["nodeType"],
            credential_types=list(value.get("credentialTypes") or []),
            parameters={p["path"]: p.get("hint", "") for p in value.get("parameters") or []},
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "nodeName": self.node_name,
            "nodeType": self.node_type,
            "credentialTypes": self.credential_types,
            "parameters": [{"path": p, "hint": h} for p, h in self.parameters.items()],
        }


def needed(
    workflow: dict[str, Any], catalog: Catalog, known_credentials: set[str]
) -> list[NodeSetup]:
    """Per node, in workflow order: what is missing."""
    missing: dict[str, set[str]] = {}
    for finding in catalog.check_workflow(workflow):
        if finding.code == "MISSING_CREDENTIAL" and finding.node_name and finding.path:
            missing.setdefault(finding.node_name, set()).add(finding.path.split(".", 1)[1])
    out = []
    for node in workflow.get("nodes") or []:
        name = str(node.get("name"))
        setup = NodeSetup(node_name=name, node_type=str(node.get("type")))
        slots = node.get("credentials") or {}
        dangling = {
            kind
            for kind, ref in slots.items()
            if not isinstance(ref, dict) or ref.get("id") not in known_credentials
        }
        setup.credential_types = sorted(missing.get(name, set()) | dangling)
        setup.parameters = dict(_placeholders(node.get("parameters") or {}, ""))
        if setup.credential_types or setup.parameters:
            out.append(setup)
    return out


def _placeholders(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        found = PLACEHOLDER.search(value)
        if found:
            yield path, found.group(1)
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield from _placeholders(sub, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _placeholders(sub, f"{path}.{index}" if path else str(index))
