"""The node and credential type catalog: what node types exist, in which versions, with which
parameters and credential slots; search over it; and the catalog layer of build validation.

Read from the `nodes.json` / `credentials.json` the sandbox image carries (one entry per node
*version group*), so it always matches what the sandbox compiles against.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from sandbox.image.catalog import CATALOG_PACKAGES

__all__ = ["Catalog", "CredentialType", "Description", "Finding", "NodeType"]

Description = dict[str, Any]

# Property types that are layout, not parameters: they never appear in saved parameters.
_LAYOUT_TYPES = {"notice", "button", "callout"}


@dataclass(frozen=True, kw_only=True)
class NodeType:
    """One node type across its version groups (newest group first)."""

    name: str
    groups: list[tuple[tuple[float, ...], Description]]

    @property
    def latest(self) -> Description:
        return self.groups[0][1]

    @property
    def display_name(self) -> str:
        return str(self.latest.get("displayName", self.name)).strip()

    @property
    def description(self) -> str:
        return " ".join(str(self.latest.get("description", "")).split())

    @property
    def group(self) -> list[str]:
        return list(self.latest.get("group", []))

    @cached_property
    def versions(self) -> list[float]:
        return sorted({v for versions, _ in self.groups for v in versions})

    @property
    def default_version(self) -> float:
        default = self.latest.get("defaultVersion")
        return float(default) if default is not None else self.versions[-1]

    @property
    def is_trigger(self) -> bool:
        return "trigger" in self.group

    @property
    def hidden(self) -> bool:
        return bool(self.latest.get("hidden"))

    @property
    def codex(self) -> dict[str, Any]:
        return dict(self.latest.get("codex") or {})

    @cached_property
    def aliases(self) -> list[str]:
        return [str(a) for _, d in self.groups for a in (d.get("codex") or {}).get("alias", [])]

    @property
    def categories(self) -> list[str]:
        return list(self.codex.get("categories", []))

    @property
    def builder_hint(self) -> dict[str, Any]:
        return dict(self.latest.get("builderHint") or {})

    def entry(self, version: float) -> Description | None:
        for versions, description in self.groups:
            if version in versions:
                return description
        return None

    def format_version(self, version: float) -> str:
        return f"{version:g}"


@dataclass(frozen=True, kw_only=True)
class CredentialType:
    name: str
    display_name: str
    documentation_url: str
    supported_nodes: list[str]
    extends: list[str]
    properties: list[dict[str, Any]]
    # The declared test request ({request, rules}) and how the type authenticates requests
    # ({type: generic, properties: {headers, qs, body, auth}}; {} when done in code).
    test: dict[str, Any] | None = None
    authenticate: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One catalog-layer validation finding, shaped like the sandbox's."""

    source: str
    severity: str  # "error" | "warning"
    code: str
    message: str
    node_name: str | None = None
    path: str | None = None


@dataclass(kw_only=True)
class Catalog:
    nodes: dict[str, NodeType]
    credentials: dict[str, CredentialType]
    _search_text: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> Catalog:
        """From `directory/<package>/{nodes,credentials}.json` (see sandbox.image.catalog)."""
        groups: dict[str, list[tuple[tuple[float, ...], Description]]] = {}
        credentials: dict[str, CredentialType] = {}
        for package, prefix in CATALOG_PACKAGES.items():
            for description in json.loads((directory / package / "nodes.json").read_text()):
                raw = description.get("version", 1)
                versions = tuple(float(v) for v in (raw if isinstance(raw, list) else [raw]))
                groups.setdefault(f"{prefix}.{description['name']}", []).append(
                    (versions, description)
                )
            for entry in json.loads((directory / package / "credentials.json").read_text()):
                credentials[entry["name"]] = CredentialType(
                    name=entry["name"],
                    display_name=str(entry.get("displayName", entry["name"])),
                    documentation_url=str(entry.get("documentationUrl", "")),
                    supported_nodes=list(entry.get("supportedNodes", [])),
                    extends=list(entry.get("extends", [])),
                    properties=list(entry.get("properties", [])),
                    test=entry.get("test") or None,
                    authenticate=dict(entry.get("authenticate") or {}),
                )
        nodes = {
            name: NodeType(name=name, groups=sorted(found, key=lambda g: -max(g[0])))
            for name, found in groups.items()
        }
        return cls(nodes=nodes, credentials=credentials)

    def node(self, name: str) -> NodeType | None:
        return self.nodes.get(name)

    def is_trigger(self, type_name: str) -> bool:
        """Whether a node type starts workflows (unknown types: judged by their name)."""
        node_type = self.nodes.get(type_name)
        return node_type.is_trigger if node_type else type_name.endswith("Trigger")

    def credential_types_needed(self, node: dict[str, Any]) -> list[str]:
        """The credential types a node needs to run, given its parameters: its required
        slots shown for them, or the type an HTTP-style node picks by parameter."""
        parameters = node.get("parameters") or {}
        if not isinstance(parameters, dict):
            return []
        authentication = parameters.get("authentication")
        chosen = {
            "genericCredentialType": parameters.get("genericAuthType"),
            "predefinedCredentialType": parameters.get("nodeCredentialType"),
        }.get(str(authentication))
        if isinstance(chosen, str) and chosen:
            return [chosen]
        node_type = self.nodes.get(str(node.get("type", "")))
        try:
            entry = node_type.entry(float(node.get("typeVersion", 1))) if node_type else None
        except (TypeError, ValueError):
            entry = None
        if entry is None:
            return []
        defaults = {
            p["name"]: p.get("default")
            for p in reversed(entry.get("properties") or [])
            if isinstance(p, dict) and "name" in p
        }
        return [
            slot["name"]
            for slot in entry.get("credentials") or []
            if slot.get("required")
            and _shown(slot.get("displayOptions") or {}, {**defaults, **parameters})
        ]

    def triggers(self, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The enabled trigger nodes of a workflow, in order."""
        return [
            n for n in nodes if not n.get("disabled") and self.is_trigger(str(n.get("type", "")))
        ]

    def similar_nodes(self, name: str, limit: int = 3) -> list[str]:
        short = name.rsplit(".", 1)[-1].lower()
        by_short = {n.rsplit(".", 1)[-1].lower(): n for n in self.nodes}
        return [by_short[s] for s in difflib.get_close_matches(short, by_short, n=limit)]

    # -- search -------------------------------------------------------------------------

    def search_nodes(self, query: str, *, limit: int = 20) -> list[NodeType]:
        """Ranked by relevance: service names and aliases first, then words in the
        description. Retired (hidden) types only when nothing else matches."""
        scored = [(self._score(node, query), node) for node in self.nodes.values()]
        hits = [(score, node) for score, node in scored if score > 0]
        visible = [hit for hit in hits if not hit[1].hidden] or hits
        visible.sort(key=lambda hit: (-hit[0], hit[1].display_name))
        return [node for _, node in visible[:limit]]

    @staticmethod
    def _score(node: NodeType, query: str) -> float:
        q = " ".join(query.lower().split())
        if not q:
            return 0.0
        display = node.display_name.lower()
        short = node.name.rsplit(".", 1)[-1].lower()
        compact = q.replace(" ", "")
        aliases = [a.lower() for a in node.aliases]
        score = 0.0
        if q == display or compact == short:
            score = 100.0
        elif q in aliases:
            score = 80.0
        elif display.startswith(q) or short.startswith(compact):
            score = 60.0 - len(display) / 100  # "Slack" before "Slack Trigger"
        elif q in display or compact in short:
            score = 45.0
        elif any(q in alias for alias in aliases):
            score = 30.0
        words = re.findall(r"[a-z0-9]+", q)
        text = " ".join([display, short, node.description.lower(), *aliases])
        matched = [w for w in words if w in text]
        if words and len(matched) == len(words):
            score = max(score, 10.0 + 5.0 * len(matched))
        if score and node.is_trigger != ("trigger" in q):
            score -= 5.0  # a trigger when asked for one, an action otherwise
        return score

    def search_credentials(self, query: str, *, limit: int = 20) -> list[CredentialType]:
        q = query.lower().strip()
        hits: list[tuple[float, CredentialType]] = []
        for credential in self.credentials.values():
            name, display = credential.name.lower(), credential.display_name.lower()
            if q in (name, display):
                score = 100.0
            elif name.startswith(q) or display.startswith(q):
                score = 60.0
            elif q in name or q in display:
                score = 40.0
            elif any(q in node.lower() for node in credential.supported_nodes):
                score = 20.0
            else:
                continue
            hits.append((score, credential))
        hits.sort(key=lambda hit: (-hit[0], hit[1].display_name))
        return [credential for _, credential in hits[:limit]]

    # -- the catalog layer of build validation ------------------------------------------

    def check_workflow(self, workflow: dict[str, Any]) -> list[Finding]:
        """Node types and versions, retired types, top-level parameter keys and credential
        slots of every node in a WorkflowJSON."""
        findings: list[Finding] = []
        for node in workflow.get("nodes") or []:
            if isinstance(node, dict):
                findings.extend(self._check_node(node))
        return findings

    def _check_node(self, node: dict[str, Any]) -> Iterable[Finding]:
        name = str(node.get("name", "?"))
        type_name = str(node.get("type", ""))
        node_type = self.nodes.get(type_name)
        if node_type is None:
            similar = self.similar_nodes(type_name)
            hint = f" Did you mean {', '.join(similar)}?" if similar else ""
            yield Finding(
                source="catalog",
                severity="error",
                code="UNKNOWN_NODE_TYPE",
                message=f"Node '{name}' has the unknown type '{type_name}'.{hint} "
                "Find types with search-nodes.",
                node_name=name,
            )
            return
        try:
            version = float(node.get("typeVersion", 1))
        except (TypeError, ValueError):
            version = -1.0
        entry = node_type.entry(version)
        if entry is None:
            available = ", ".join(node_type.format_version(v) for v in node_type.versions)
            yield Finding(
                source="catalog",
                severity="error",
                code="UNKNOWN_NODE_VERSION",
                message=f"Node '{name}': {type_name} has no version "
                f"{node.get('typeVersion')}. Available versions: {available} "
                f"(default {node_type.format_version(node_type.default_version)}).",
                node_name=name,
            )
            return
        if entry.get("hidden"):
            advice = (entry.get("builderHint") or {}).get("searchHint") or (
                "Use a current node instead (search-nodes)."
            )
            yield Finding(
                source="catalog",
                severity="warning",
                code="DEPRECATED_NODE_TYPE",
                message=f"Node '{name}' uses the retired node type '{type_name}'. {advice}",
                node_name=name,
            )
        yield from _check_parameters(name, node_type, version, entry, node.get("parameters"))
        yield from self._check_credentials(name, entry, node)

    def _check_credentials(
        self, name: str, entry: Description, node: dict[str, Any]
    ) -> Iterable[Finding]:
        given = node.get("credentials") or {}
        if not isinstance(given, dict):
            return
        slots = {slot["name"] for slot in entry.get("credentials") or []}
        parameters = node.get("parameters") or {}
        # The HTTP Request style: any credential type, chosen by a parameter.
        any_type = isinstance(parameters, dict) and parameters.get("authentication") in (
            "predefinedCredentialType",
            "genericCredentialType",
        )
        for slot in given:
            if slot not in self.credentials:
                similar = difflib.get_close_matches(slot, list(self.credentials), n=3)
                hint = f" Did you mean {', '.join(similar)}?" if similar else ""
                yield Finding(
                    source="credentials",
                    severity="error",
                    code="UNKNOWN_CREDENTIAL_TYPE",
                    message=f"Node '{name}' uses the unknown credential type '{slot}'.{hint}",
                    node_name=name,
                    path=f"credentials.{slot}",
                )
            elif slots and slot not in slots and not any_type:
                yield Finding(
                    source="credentials",
                    severity="error",
                    code="CREDENTIAL_SLOT_MISMATCH",
                    message=f"Node '{name}' does not take a '{slot}' credential; "
                    f"it takes {', '.join(sorted(slots))}.",
                    node_name=name,
                    path=f"credentials.{slot}",
                )
        for slot in entry.get("credentials") or []:
            if (
                slot.get("required")
                and not slot.get("displayOptions")
                and slot["name"] not in given
            ):
                yield Finding(
                    source="credentials",
                    severity="warning",
                    code="MISSING_CREDENTIAL",
                    message=f"Node '{name}' needs a '{slot['name']}' credential before it can "
                    "run for real (verification simulates it).",
                    node_name=name,
                    path=f"credentials.{slot['name']}",
                )


def _check_parameters(
    name: str, node_type: NodeType, version: float, entry: Description, parameters: Any
) -> Iterable[Finding]:
    """Top-level parameter keys the node version does not have. A key close to a real one
    is almost surely a typo and blocks the save; others are warnings."""
    if not isinstance(parameters, dict):
        return
    known = {
        str(p["name"])
        for p in entry.get("properties") or []
        if isinstance(p, dict) and "name" in p and p.get("type") not in _LAYOUT_TYPES
    }
    if not known:
        return
    for key in parameters:
        if key in known:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
        label = f"{node_type.display_name} v{node_type.format_version(version)}"
        if close:
            yield Finding(
                source="catalog",
                severity="error",
                code="UNKNOWN_PARAMETER",
                message=f"Node '{name}': {label} has no parameter '{key}'. "
                f"Did you mean '{close[0]}'?",
                node_name=name,
                path=f"parameters.{key}",
            )
        else:
            yield Finding(
                source="catalog",
                severity="warning",
                code="UNKNOWN_PARAMETER",
                message=f"Node '{name}': {label} has no parameter '{key}'; n8n ignores it.",
                node_name=name,
                path=f"parameters.{key}",
            )


def _shown(display_options: dict[str, Any], values: dict[str, Any]) -> bool:
    """n8n's displayOptions for plain values (conditions on versions or with operators
    count as met: the slot is then judged needed, which at worst mocks one more node)."""

    def matches(key: str, wanted: Any) -> bool:
        if key.startswith("@") or not isinstance(wanted, list):
            return True
        plain = [w for w in wanted if not isinstance(w, dict)]
        return len(plain) < len(wanted) or values.get(key) in plain

    show = display_options.get("show") or {}
    hide = display_options.get("hide") or {}
    return all(matches(k, v) for k, v in show.items()) and not any(
        not k.startswith("@") and isinstance(v, list) and values.get(k) in v
        for k, v in hide.items()
    )
