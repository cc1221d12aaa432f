"""The claim a verification run supports, and the failure classes."""

from __future__ import annotations

import pytest

from server.pipeline.claim import claim_from_evidence, classify_failure

PLANNED = ["Shape", "Is Large?", "Notify"]


@pytest.mark.parametrize(
    ("succeeded", "reached", "simulated", "targets", "level"),
    [
        (True, PLANNED, [], [], "verified"),
        (True, PLANNED, ["Notify"], [], "partial"),  # a write was simulated
        (True, ["Shape", "Is Large?"], [], [], "partial"),  # a branch was not taken
        (True, ["Shape", "Is Large?"], [], ["Notify"], "unproven"),  # the fix was not reached
        (True, PLANNED, ["Notify"], ["Notify"], "unproven"),  # the fix was only simulated
        (False, PLANNED, [], [], "failed"),
    ],
)
def test_each_claim_level(
    succeeded: bool, reached: list[str], simulated: list[str], targets: list[str], level: str
) -> None:
    claim = claim_from_evidence(
        succeeded=succeeded,
        planned_nodes=PLANNED,
        reached=reached,
        simulated=simulated,
        fix_targets=targets,
    )
    assert claim.level == level
    assert claim.publish_ready is (level == "verified")
    assert claim.live_test_recommended is (level in ("partial", "unproven"))
    assert claim.reached_node_count == len([n for n in PLANNED if n in reached])
    assert claim.as_json()["level"] == level


@pytest.mark.parametrize(
    ("message", "category", "reason"),
    [
        ("Node does not have any credentials set", "needs_setup", "credential_or_setup_failure"),
        ("Request failed with status code 403", "needs_setup", "credential_or_setup_failure"),
        ("You exceeded your current quota", "needs_setup", "credential_or_setup_failure"),
        ("429 Too Many Requests", "blocked", "external_service_or_timeout"),
        ("502 Bad Gateway", "blocked", "external_service_or_timeout"),
        ("the request timed out", "blocked", "external_service_or_timeout"),
        ("getaddrinfo ENOTFOUND api.example.com", "blocked", "external_service_or_timeout"),
        ("The service refused the connection", "blocked", "external_service_or_timeout"),
        (
            "Cannot read properties of undefined (reading 'amount')",
            "code_fixable",
            "runtime_failure",
        ),
    ],
)
def test_failure_classes(message: str, category: str, reason: str) -> None:
    found = classify_failure(message)
    assert (found.category, found.reason) == (category, reason)
    assert found.should_edit is (category == "code_fixable")


def test_placeholders_and_mocked_credentials_need_setup() -> None:
    assert classify_failure("anything", placeholder=True).reason == (
        "mocked_credentials_or_placeholders"
    )
    assert classify_failure("401 unauthorized", mocked_credentials=True).reason == (
        "mocked_credentials_or_placeholders"
    )
    assert classify_failure("model said no", chat_model=True).reason == "chat_model_failure"
