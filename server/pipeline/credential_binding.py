"""Credentials at build: each credential a built workflow's nodes need is bound to a real
credential the caller may use, or *mocked*: taken off the node and recorded, so verification
simulates that node and `apply-workflow-credentials` can put the real one on later.

A slot is kept, restored or bound in this order (the reference's order): the source names a
credential that exists, has the slot's type and is visible to the caller; the same node had one
in the workflow's current version; another node of this workflow uses one of that type; the
caller has exactly one credential of that type. Anything else is mocked: never a guess between
several credentials, never someone else's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from server.instance.types import CredentialInfo

__all__ = ["CredentialResolution", "resolve_credentials"]


@dataclass(kw_only=True)
class CredentialResolution:
    # The workflow's nodes with every slot bound to a real credential or mocked (removed).
    nodes: list[dict[str, Any]]
    # Node name → the credential types mocked on it.
    mocked: dict[str, list[str]] = field(default_factory=dict)
    # Node name → (credential type, credential name) bound on it.
    bound: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    @property
    def mocked_types(self) -> list[str]:
        return sorted({kind for kinds in self.mocked.values() for kind in kinds})

    def note(self) -> str | None:
        """What happened, for the model (None when nothing needed a credential)."""
        parts = []
        if self.bound:
            bound = "; ".join(
                f'"{name}" ({kind}) on "{node}"'
                for node, pairs in self.bound.items()
                for kind, name in pairs
            )
            parts.append(f"Connected existing credentials: {bound}.")
        if self.mocked:
            mocked = "; ".join(f'{", ".join(k)} on "{n}"' for n, k in self.mocked.items())
            parts.append(
                f"Mocked (no single matching credential the user may use): {mocked}. "
                "Verification simulates these nodes; once the user has the credentials, put "
                "them on with apply-workflow-credentials and verify again."
            )
        return " ".join(parts) or None


def resolve_credentials(
    nodes: Sequence[dict[str, Any]],
    *,
    available: Iterable[CredentialInfo],
    previous: Sequence[dict[str, Any]] = (),
    needed: Callable[[dict[str, Any]], list[str]],
) -> CredentialResolution:
    """Bind or mock every credential slot of `nodes` (a copy is changed, not the input).
    `available`: the credentials the caller may use; `previous`: the nodes of the workflow's
    current version; `needed`: the credential types a node requires by its parameters."""
    by_id = {c.id: c for c in available}
    by_type: dict[str, list[CredentialInfo]] = {}
    for credential in by_id.values():
        by_type.setdefault(credential.type, []).append(credential)

    def known(value: Any, kind: str) -> CredentialInfo | None:
        found = by_id.get(str(value.get("id"))) if isinstance(value, dict) else None
        return found if found is not None and found.type == kind else None

    earlier = {str(n.get("name")): n.get("credentials") or {} for n in previous}
    siblings: dict[str, CredentialInfo] = {}
    for node in [*nodes, *previous]:
        for kind, value in (node.get("credentials") or {}).items():
            if (found := known(value, kind)) is not None:
                siblings.setdefault(kind, found)

    resolution = CredentialResolution(nodes=copy.deepcopy(list(nodes)))
    for node in resolution.nodes:
        name = str(node.get("name"))
        slots: dict[str, Any] = dict(node.get("credentials") or {})
        for kind in needed(node):
            slots.setdefault(kind, None)
        resolved: dict[str, Any] = {}
        for kind, value in slots.items():
            found = (
                known(value, kind)
                or known(earlier.get(name, {}).get(kind), kind)
                or siblings.get(kind)
                or (by_type[kind][0] if len(by_type.get(kind, [])) == 1 else None)
            )
            if found is None:
                resolution.mocked.setdefault(name, []).append(kind)
                continue
            siblings.setdefault(kind, found)
            resolved[kind] = {"id": found.id, "name": found.name}
            resolution.bound.setdefault(name, []).append((kind, found.name))
        if resolved:
            node["credentials"] = resolved
        else:
            node.pop("credentials", None)
    return resolution
