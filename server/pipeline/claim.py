"""What a verification run proves (the claim) and what to do when it failed (the failure
class), both derived from evidence only, never from what a model says about the run."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Category",
    "Claim",
    "ClaimLevel",
    "FailureClass",
    "claim_from_evidence",
    "classify_failure",
]

ClaimLevel = Literal["verified", "partial", "unproven", "failed"]
Category = Literal["code_fixable", "needs_setup", "blocked"]


@dataclass(frozen=True, kw_only=True)
class Claim:
    level: ClaimLevel
    planned_node_count: int
    reached_node_count: int
    nodes_not_reached: list[str]
    simulated_nodes: list[str]
    unproven_targets: list[str] = field(default_factory=list)

    @property
    def publish_ready(self) -> bool:
        return self.level == "verified"

    @property
    def live_test_recommended(self) -> bool:
        return self.level in ("partial", "unproven")

    def as_json(self) -> dict[str, object]:
        return {
            "level": self.level,
            "plannedNodeCount": self.planned_node_count,
            "reachedNodeCount": self.reached_node_count,
            "nodesNotReached": self.nodes_not_reached,
            "simulatedNodes": self.simulated_nodes,
            "unprovenTargets": self.unproven_targets,
            "publishReady": self.publish_ready,
            "liveTestRecommended": self.live_test_recommended,
        }


def claim_from_evidence(
    *,
    succeeded: bool,
    planned_nodes: Iterable[str],
    reached: Iterable[str],
    simulated: Iterable[str],
    fix_targets: Iterable[str] = (),
) -> Claim:
    """`failed` if the run did not succeed; `unproven` if a node the repair targeted was not
    reached or was simulated; `partial` if any planned node was not reached or was simulated;
    else `verified`."""
    planned = list(dict.fromkeys(planned_nodes))
    reached_set, simulated_set = set(reached), set(simulated)
    not_reached = [n for n in planned if n not in reached_set]
    simulated_planned = [n for n in planned if n in simulated_set]
    unproven = [t for t in dict.fromkeys(fix_targets) if t not in reached_set or t in simulated_set]
    if not succeeded:
        level: ClaimLevel = "failed"
    elif unproven:
        level = "unproven"
    elif not_reached or simulated_planned:
        level = "partial"
    else:
        level = "verified"
    return Claim(
        level=level,
        planned_node_count=len(planned),
        reached_node_count=len([n for n in planned if n in reached_set]),
        nodes_not_reached=not_reached,
        simulated_nodes=simulated_planned,
        unproven_targets=unproven,
    )


@dataclass(frozen=True, kw_only=True)
class FailureClass:
    category: Category
    reason: str
    should_edit: bool


_SETUP = re.compile(r"credential|unauthori[sz]ed|forbidden|\b401\b|\b403\b|free tier|quota", re.I)
# The sandbox has no network: a node that reaches out fails with one of the resolver/socket
# errors, which no edit of the workflow can fix there.
_EXTERNAL = re.compile(
    r"\b429\b|rate limit|\b502\b|bad gateway|timed out"
    r"|ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ENETUNREACH|getaddrinfo|refused the connection",
    re.I,
)


def classify_failure(
    message: str,
    *,
    placeholder: bool = False,
    mocked_credentials: bool = False,
    chat_model: bool = False,
) -> FailureClass:
    """The reference's failure classes, in order: placeholders and credential problems need
    setup; rate limits, gateways and timeouts are outside the workflow's control; anything else
    is for the code to fix."""
    if placeholder:
        return FailureClass(
            category="needs_setup", reason="mocked_credentials_or_placeholders", should_edit=False
        )
    if _SETUP.search(message):
        reason = (
            "mocked_credentials_or_placeholders"
            if mocked_credentials
            else "credential_or_setup_failure"
        )
        return FailureClass(category="needs_setup", reason=reason, should_edit=False)
    if _EXTERNAL.search(message):
        return FailureClass(
            category="blocked", reason="external_service_or_timeout", should_edit=False
        )
    reason = "chat_model_failure" if chat_model else "runtime_failure"
    return FailureClass(category="code_fixable", reason=reason, should_edit=True)
