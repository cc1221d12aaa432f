"""The simulation plan: which nodes a verification run executes and which it simulates (pins
with fixtures), decided when a workflow is built and never blocking the save.

The deterministic classifier follows the reference's rule order; the first matching rule wins.
Nodes it cannot decide are *ambiguous*: a model may judge them (one batched call, when a model
is configured); without one, or on any doubt, they are simulated (`source: fallback`), since a
wrongly executed write is worse than a wrongly simulated read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ALWAYS_SIMULATE",
    "BASE",
    "CODE_SIDE_EFFECTS",
    "CODE_TYPES",
    "LANGCHAIN",
    "MAX_EXECUTED_WAIT_S",
    "READ_OPERATIONS",
    "SAFE_HTTP_METHODS",
    "SAFE_TYPES",
    "SUPPORTED_TRIGGERS",
    "WAIT_UNIT_SECONDS",
    "WRITE_OPERATIONS",
    "Ambiguous",
    "Confidence",
    "Decision",
    "PlanEntry",
    "Source",
    "Verdict",
    "classify",
    "main_flow_nodes",
    "mocked_nodes",
    "plan_simulation",
]

Verdict = Literal["simulate", "execute"]
Confidence = Literal["high", "medium", "low"]
Source = Literal["rule", "declared", "mocked", "trigger", "ai_root", "sandbox", "model", "fallback"]

BASE = "n8n-nodes-base."
LANGCHAIN = "@n8n/n8n-nodes-langchain."


def _names(text: str, prefix: str = "") -> frozenset[str]:
    return frozenset(prefix + name for name in text.split())


SAFE_TYPES = _names(
    """set if filter switch merge noOp splitOut splitInBatches aggregate summarize sort limit
    removeDuplicates itemLists renameKeys dateTime html markdown xml crypto compareDatasets
    extractFromFile convertToFile editImage stopAndError respondToWebhook""",
    BASE,
) | _names(
    "agent chainLlm chainSummarization informationExtractor textClassifier sentimentAnalysis",
    LANGCHAIN,
)
ALWAYS_SIMULATE = _names("emailSend executeCommand ssh executeWorkflow", BASE)
SAFE_HTTP_METHODS = _names("GET HEAD OPTIONS")
CODE_TYPES = _names("code function functionItem", BASE)
# Code that may reach the outside world.
CODE_SIDE_EFFECTS = (
    *("fetch", "axios", "http", "request", "helpers.", "child_process", "execsync"),
    *("fs.", "net.", "dgram", "websocket"),
)
WRITE_OPERATIONS = _names(
    """create update upsert delete deleterows insert send sendandwait post append appendorupdate
    write remove archive unarchive move add publish invite share complete cancel upload mark
    star assign"""
)
READ_OPERATIONS = _names(
    "get getall getmany search list read lookup fetch download retrieve select query load"
)
WAIT_UNIT_SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}
MAX_EXECUTED_WAIT_S = 60
SUPPORTED_TRIGGERS = {
    BASE + "manualTrigger",
    BASE + "webhook",
    BASE + "formTrigger",
    BASE + "scheduleTrigger",
    LANGCHAIN + "chatTrigger",
}


@dataclass(frozen=True, kw_only=True)
class PlanEntry:
    node_name: str
    verdict: Verdict
    reason: str
    confidence: Confidence
    source: Source
    # For `mocked`: the credential types the build mocked on the node.
    mocked_credential_types: tuple[str, ...] = ()
    # Output the model wrote for a simulated node (server/pipeline/judgement.py).
    fixture: list[dict[str, Any]] | None = None
    # Why the model did not judge an ambiguous node (it stayed simulated to be safe).
    model_error: str | None = None

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "nodeName": self.node_name,
            "verdict": self.verdict,
            "reason": self.reason,
            "confidence": self.confidence,
            "source": self.source,
        }
        if self.mocked_credential_types:
            found["mockedCredentialTypes"] = list(self.mocked_credential_types)
        if self.fixture is not None:
            found["fixture"] = self.fixture
        if self.model_error is not None:
            found["modelError"] = self.model_error
        return found


@dataclass(frozen=True)
class Ambiguous:
    """The classifier could not decide; `reason` says why."""

    reason: str


Decision = tuple[Verdict, str] | Ambiguous


def classify(node: dict[str, Any]) -> Decision:
    """The deterministic rules for one node, in the reference's order."""
    type_name = str(node.get("type", ""))
    parameters = node.get("parameters") or {}
    if type_name in SAFE_TYPES:
        return "execute", "transforms data only"
    if type_name in ALWAYS_SIMULATE:
        return "simulate", "sends email, runs commands or calls another workflow"
    by_type = _BY_TYPE.get(type_name)
    if by_type is not None:
        return by_type(parameters)
    return _classify_operation(parameters.get("operation", parameters.get("mode")))


def _classify_http(parameters: dict[str, Any]) -> Decision:
    method = str(parameters.get("method") or parameters.get("requestMethod") or "GET").upper()
    if method in SAFE_HTTP_METHODS:
        return "execute", f"HTTP {method} only reads"
    return Ambiguous(f"HTTP {method} may change something")


def _classify_form(_parameters: dict[str, Any]) -> Decision:
    return "simulate", "a form page waits for a person"


def _classify_code(parameters: dict[str, Any]) -> Decision:
    source = " ".join(
        str(parameters.get(key, "")) for key in ("jsCode", "pythonCode", "functionCode", "code")
    ).lower()
    found = [word for word in CODE_SIDE_EFFECTS if word in source]
    if found:
        return Ambiguous(f"code mentions {', '.join(found)}")
    return "execute", "code without network or file access"


def _classify_operation(operation: Any) -> Decision:
    if operation is not None:
        letters = re.sub(r"[^a-z]", "", str(operation).lower())
        if letters in WRITE_OPERATIONS:
            return "simulate", f"operation '{operation}' writes"
        if letters in READ_OPERATIONS:
            return "execute", f"operation '{operation}' reads"
    return Ambiguous("no rule decides this node")


def _classify_wait(parameters: dict[str, Any]) -> Decision:
    resume = str(parameters.get("resume", "timeInterval"))
    if resume != "timeInterval":
        return "simulate", f"waits for {resume}"
    try:
        amount = float(parameters.get("amount", 1))
    except (TypeError, ValueError):
        return "simulate", "waits for an amount given by an expression"
    seconds = amount * WAIT_UNIT_SECONDS.get(str(parameters.get("unit", "hours")), 3600)
    if seconds <= MAX_EXECUTED_WAIT_S:
        return "execute", f"waits {seconds:g} s"
    return "simulate", f"waits {seconds:g} s, longer than {MAX_EXECUTED_WAIT_S} s"


_BY_TYPE: dict[str, Callable[[dict[str, Any]], Decision]] = {
    BASE + "httpRequest": _classify_http,
    BASE + "form": _classify_form,
    BASE + "wait": _classify_wait,
    **{type_name: _classify_code for type_name in CODE_TYPES},
}


def mocked_nodes(plan: Iterable[dict[str, Any]] | None) -> dict[str, list[str]]:
    """Node name → credential types mocked on it, from a saved plan (`PlanEntry.as_json`)."""
    return {
        str(e["nodeName"]): list(e.get("mockedCredentialTypes") or [])
        for e in plan or []
        if e.get("source") == "mocked"
    }


def main_flow_nodes(workflow: dict[str, Any]) -> set[str]:
    """Names of nodes that are a source or target of a `main` connection."""
    names: set[str] = set()
    for source, outputs in (workflow.get("connections") or {}).items():
        for target in _targets(outputs.get("main")):
            names.update((source, target))
    return names


def _targets(slots: Any) -> Iterable[str]:
    for slot in slots or []:
        for connection in slot or []:
            if isinstance(connection, dict) and "node" in connection:
                yield str(connection["node"])


def _sub_node_feeds(workflow: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """For each root: its sub-nodes by connection type (ai_languageModel, ai_tool, ...)."""
    feeds: dict[str, dict[str, list[str]]] = {}
    for source, outputs in (workflow.get("connections") or {}).items():
        for kind, slots in outputs.items():
            if kind.startswith("ai_"):
                for target in _targets(slots):
                    feeds.setdefault(target, {}).setdefault(kind, []).append(source)
    return feeds


def plan_simulation(
    workflow: dict[str, Any],
    *,
    declared_outputs: Iterable[str] = (),
    mocked: Mapping[str, Sequence[str]] | None = None,
    is_trigger: Callable[[str], bool],
    runs_in_sandbox: Callable[[str], bool],
) -> list[PlanEntry]:
    """The plan for every node a verification run could reach, most specific reason first:
    declared outputs, mocked credentials (`mocked`: node name → types), unsupported triggers,
    AI roots, nodes the sandbox cannot run, then the classifier (ambiguous → simulate, low
    confidence, `fallback`, until a model judges them)."""
    nodes = {str(n.get("name")): n for n in workflow.get("nodes") or [] if isinstance(n, dict)}
    declared = set(declared_outputs)
    flow = main_flow_nodes(workflow)
    feeds = _sub_node_feeds(workflow)
    plan: list[PlanEntry] = []
    for name, node in nodes.items():
        type_name = str(node.get("type", ""))
        if node.get("disabled") or type_name == BASE + "stickyNote":
            continue
        in_flow = name in flow or (len(nodes) == 1 and not feeds)
        entry = _plan_node(
            name,
            node,
            declared,
            tuple((mocked or {}).get(name, ())),
            feeds.get(name, {}),
            nodes,
            is_trigger,
            runs_in_sandbox,
        )
        if entry is not None and (in_flow or entry.source in ("declared", "trigger")):
            plan.append(entry)
    return plan


def _plan_node(
    name: str,
    node: dict[str, Any],
    declared: set[str],
    mocked: tuple[str, ...],
    feeds: dict[str, list[str]],
    nodes: dict[str, dict[str, Any]],
    is_trigger: Callable[[str], bool],
    runs_in_sandbox: Callable[[str], bool],
) -> PlanEntry | None:
    type_name = str(node.get("type", ""))

    def entry(verdict: Verdict, reason: str, confidence: Confidence, source: Source) -> PlanEntry:
        return PlanEntry(
            node_name=name, verdict=verdict, reason=reason, confidence=confidence, source=source
        )

    if is_trigger(type_name) and type_name in SUPPORTED_TRIGGERS:
        # Fed by the run's trigger input (a declared fixture is its default input).
        return None
    if name in declared:
        return entry("simulate", "the source declares its verification output", "high", "declared")
    if mocked:
        return PlanEntry(
            node_name=name,
            verdict="simulate",
            reason=f"its credentials are mocked ({', '.join(mocked)}) until real ones are applied",
            confidence="high",
            source="mocked",
            mocked_credential_types=mocked,
        )
    if is_trigger(type_name):
        return entry("simulate", "this trigger cannot be fired in a test run", "high", "trigger")
    models = feeds.get("ai_languageModel", [])
    if models and not any(nodes.get(model, {}).get("credentials") for model in models):
        return entry("simulate", "its chat model has no usable credentials", "high", "ai_root")
    if not runs_in_sandbox(type_name):
        return entry("simulate", "its code is not installed in the sandbox", "high", "sandbox")
    decision = classify(node)
    if isinstance(decision, Ambiguous):
        return entry("simulate", f"{decision.reason}; simulated to be safe", "low", "fallback")
    verdict, reason = decision
    return entry(verdict, reason, "high", "rule")
