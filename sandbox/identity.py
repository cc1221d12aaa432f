"""Deterministic sandbox identity: a restarted process or another replica finds the same
sandbox for a thread. Names derive from the id (never from the caller's text directly)."""

from __future__ import annotations

import hashlib
import uuid

__all__ = [
    "LABEL_CREATED",
    "LABEL_EGRESS",
    "LABEL_IMAGE",
    "LABEL_KIND",
    "LABEL_LEASE",
    "LABEL_OWNER",
    "LABEL_POOL",
    "LABEL_PREFIX",
    "LABEL_SANDBOX",
    "LABEL_THREAD",
    "NAMESPACE",
    "container_name",
    "lease_name",
    "pool_name",
    "sandbox_id",
    "sandbox_id_from_name",
    "template_source_name",
    "volume_name",
]

# Fixed forever: changing it orphans every existing sandbox.
NAMESPACE = uuid.UUID("5c2b6f4e-8a51-4d1c-9c1e-3f0d7a3b9e21")
LABEL_PREFIX = "ai.instance-ai."
LABEL_OWNER = LABEL_PREFIX + "owner"
LABEL_THREAD = LABEL_PREFIX + "thread"
LABEL_SANDBOX = LABEL_PREFIX + "sandbox"
LABEL_CREATED = LABEL_PREFIX + "created"
LABEL_IMAGE = LABEL_PREFIX + "image"
LABEL_POOL = LABEL_PREFIX + "pool"
# On the container that proves a live service holds the owner (see sandbox/lease.py).
LABEL_LEASE = LABEL_PREFIX + "lease"
# What the sandbox is for (sandbox/kinds.py); absent on a thread's sandbox.
LABEL_KIND = LABEL_PREFIX + "kind"
# The container's own egress directory (see sandbox/egress.py), named at creation.
LABEL_EGRESS = LABEL_PREFIX + "egress"


def sandbox_id(thread_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "instance-ai-thread-" + thread_id))


def _owner_tag(owner: str) -> str:
    # Several owners (services, test runs) may share one engine: names must not collide.
    return hashlib.sha256(owner.encode()).hexdigest()[:8]


def container_name(owner: str, sid: str) -> str:
    return f"instance-ai-{_owner_tag(owner)}-sbx-{sid}"


def volume_name(owner: str, sid: str) -> str:
    return f"instance-ai-{_owner_tag(owner)}-ws-{sid}"


def pool_name(owner: str, pool_id: str, kind: str = "") -> str:
    """A warm sandbox not yet given to a thread; claiming renames it to `container_name`.
    Each kind has its own pool (`kind` is in the name of any but a thread's)."""
    pool = f"{kind}pool" if kind else "pool"
    return f"instance-ai-{_owner_tag(owner)}-{pool}-{pool_id}"


def template_source_name(owner: str, source_id: str, kind: str = "") -> str:
    """A sandbox warmed to be saved as a template, then removed: never a pool member (its
    name is not a pool name, so no process adopts or claims it)."""
    return f"instance-ai-{_owner_tag(owner)}-{kind}template-{source_id}"


def lease_name(owner: str, claim: str) -> str:
    """One holder's lease on the owner (see sandbox/lease.py)."""
    return f"instance-ai-{_owner_tag(owner)}-owner-{claim[:12]}"


def sandbox_id_from_name(owner: str, name: str) -> str | None:
    prefix = f"instance-ai-{_owner_tag(owner)}-sbx-"
    return name.removeprefix("/").removeprefix(prefix) if prefix in name else None
