"""The bridge's conversation history against n8n's own.

The agent tree is checked differentially: each event sequence below is folded by
`n8n_bridge.agent_tree` and by n8n's reducer (`@n8n/api-types`, pinned in tests/contract, run by
tests/contract/agent-tree.mjs the way n8n's backend folds a message group), and the two trees
must be the same JSON. Every event carries `ts`, so n8n's tool-call times come from the events,
not the clock, and nothing needs normalising. The message list (`rich_messages`) has no such
reference outside a running n8n; it is checked against the rules of n8n's message building."""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from n8n_bridge.agent_tree import (
    Json,
    agent_tree,
    expire_confirmations,
    js_iso,
    normalize_agent_tree,
)
from n8n_bridge.history import Said, next_event_id, rich_messages

CONTRACT = Path(__file__).resolve().parent / "contract"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class Log:
    """A thread's events as the service writes them (n8n's shape), one second apart."""

    def __init__(self, start: int = T0) -> None:
        self.events: list[Json] = []
        self.ts = start

    def add(
        self, kind: str, run: str, agent: str = "", /, *, response_id: str = "", **payload: Any
    ) -> Log:
        self.ts += 1000
        event: Json = {
            "type": kind,
            "runId": run,
            "agentId": agent or f"orchestrator-{run}",
            "ts": self.ts,
            "payload": payload,
            "threadId": "thread-1",
        }
        if response_id:
            event["responseId"] = response_id
        self.events.append(event)
        return self

    def start(self, run: str, group: str) -> Log:
        return self.add("run-start", run, messageId=f"msg-{run}", messageGroupId=group)

    def finish(self, run: str, status: str = "completed", **payload: Any) -> Log:
        return self.add("run-finish", run, status=status, **payload)


# -- the sequences ----------------------------------------------------------------------------


def text_answer() -> list[Json]:
    return (
        Log()
        .start("r1", "mg1")
        .add("thread-title-updated", "r1", title="Greetings")
        .add("text-block", "r1", text="Hello")
        .add("text-block", "r1", text=" world")
        .finish("r1")
        .events
    )


def streamed_segments() -> list[Json]:
    """Deltas seen live, then the blocks persisted for them: a block takes over the open
    segment of its answer (responseId) instead of repeating it."""
    return (
        Log()
        .start("r1", "mg1")
        .add("text-delta", "r1", response_id="a", text="Hel")
        .add("text-delta", "r1", response_id="a", text="lo")
        .add("text-block", "r1", response_id="a", text="Hello")
        .add("text-delta", "r1", response_id="b", text="Bye")
        .add("text-block", "r1", response_id="b", text="Bye now")
        .add("text-block", "r1", response_id="b", text=", really")
        .add("reasoning-delta", "r1", response_id="c", text="hm")
        .add("reasoning-block", "r1", response_id="c", text="hmm, yes")
        .add("text-block", "r1", text="Unanswered")
        .finish("r1")
        .events
    )


def tool_call_and_result() -> list[Json]:
    return (
        Log()
        .start("r1", "mg1")
        .add("tool-input-start", "r1", toolCallId="c1", toolName="workflows")
        .add("tool-call", "r1", toolCallId="c1", toolName="workflows", args={"action": "list"})
        .add("tool-input-start", "r1", toolCallId="c1", toolName="workflows")
        .add("tool-result", "r1", toolCallId="c1", result={"workflows": []})
        .add("tool-call", "r1", toolCallId="c2", toolName="research-with-agent", args={})
        .add("tool-result", "r1", toolCallId="c2", result="found it")
        .add("tool-call", "r1", toolCallId="c3", toolName="list_skills", args={})
        .add("tool-result", "r1", toolCallId="c3", result=None)
        .add("text-block", "r1", text="There are none.")
        .finish("r1")
        .events
    )


def tool_errors() -> list[Json]:
    return (
        Log()
        .start("r1", "mg1")
        .add("tool-call", "r1", toolCallId="c1", toolName="executions", args={"id": "7"})
        .add("tool-error", "r1", toolCallId="c1", error="execution 7 not found")
        .add("tool-call", "r1", toolCallId="c2", toolName="build-workflow", args={})
        .add("tool-interrupted", "r1", toolCallId="c2", error="the run was interrupted")
        .add("tool-result", "r1", toolCallId="c9", result="for a call nobody made")
        .add("tool-call", "r1", toolCallId="c3", toolName="load_skill", args={"id": "s"})
        .finish("r1")
        .events
    )


def confirmation_then_result() -> list[Json]:
    args = {"action": "delete", "dataTableId": "dt-1"}
    return (
        Log()
        .start("r1", "mg1")
        .add("tool-call", "r1", toolCallId="c1", toolName="data-tables", args=args)
        .add(
            "confirmation-request",
            "r1",
            requestId="req-1",
            toolCallId="c1",
            toolName="data-tables",
            args=args,
            severity="destructive",
            message="Delete the table Orders?",
            inputType="approval",
            resourceName="Orders",
        )
        .add("tool-result", "r1", toolCallId="c1", result={"deleted": True})
        .add("text-block", "r1", text="Deleted.")
        .finish("r1")
        .events
    )


def sub_agents() -> list[Json]:
    workflow = {"type": "workflow", "id": "wf-1"}
    return (
        Log()
        .start("r1", "mg1")
        .add("text-block", "r1", response_id="resp-1", text="Building it.")
        .add("tool-call", "r1", toolCallId="c1", toolName="build-workflow-with-agent", args={})
        .add(
            "agent-spawned",
            "r1",
            "builder-1",
            parentId="orchestrator-r1",
            role="workflow-builder",
            tools=["build-workflow", "executions"],
            taskId="task-1",
            kind="builder",
            title="Building",
            subtitle="Slack digest",
            goal="A daily digest",
            targetResource=workflow,
        )
        .add("tool-call", "r1", "builder-1", toolCallId="c2", toolName="build-workflow", args={})
        .add("status", "r1", "builder-1", message="Compiling")
        .add("tool-result", "r1", "builder-1", toolCallId="c2", result={"workflowId": "wf-1"})
        .add(
            "agent-spawned",
            "r1",
            "builder-1",
            parentId="orchestrator-r1",
            role="workflow-builder",
            tools=[],
            targetResource=workflow | {"name": "Slack digest"},
        )
        .add("text-block", "r1", "builder-1", text="Built.")
        .add("tool-call", "r1", "builder-1", toolCallId="c3", toolName="executions", args={})
        .add("agent-completed", "r1", "builder-1", role="workflow-builder", result="wf-1 built")
        .add("agent-spawned", "r1", "research-1", parentId="orchestrator-r1", role="researcher")
        .add("agent-completed", "r1", "research-1", role="researcher", result="", error="timeout")
        .add("agent-spawned", "r1", "orphan-1", parentId="nobody", role="researcher")
        .add("tool-result", "r1", toolCallId="c1", result={"ok": True})
        .add("status", "r1", message="")
        .finish("r1")
        .events
    )


def tasks_update() -> list[Json]:
    plan = [{"id": "t1", "title": "Build", "kind": "build-workflow", "spec": "s", "deps": []}]
    todo = {"tasks": [{"id": "t1", "description": "Build", "status": "todo"}]}
    done = {"tasks": [{"id": "t1", "description": "Build", "status": "done"}]}
    return (
        Log()
        .start("r1", "mg1")
        .add("tool-call", "r1", toolCallId="c1", toolName="create-tasks", args={"tasks": []})
        .add("tasks-update", "r1", tasks=todo, planItems=plan)
        .add("tool-result", "r1", toolCallId="c1", result="planned")
        .add("tool-call", "r1", toolCallId="c2", toolName="task-control", args={})
        .add("tasks-update", "r1", tasks=done)
        .add("tool-result", "r1", toolCallId="c2", result="ok")
        .finish("r1")
        .events
    )


def empty_plan() -> list[Json]:
    """An empty plan replaces the plan: `[]` is true to JavaScript."""
    plan = [{"id": "t1", "title": "Build", "kind": "build-workflow", "spec": "s", "deps": []}]
    return (
        Log()
        .start("r1", "mg1")
        .add("tasks-update", "r1", tasks={"tasks": []}, planItems=plan)
        .add("tasks-update", "r1", tasks={"tasks": []}, planItems=[])
        .finish("r1")
        .events
    )


def error_run() -> list[Json]:
    return (
        Log()
        .start("r1", "mg1")
        .add("text-block", "r1", text="Working on it")
        .add("tool-call", "r1", toolCallId="c1", toolName="workflows", args={})
        .add("error", "r1", content="The model is overloaded", statusCode=529, provider="x")
        .add("error", "r1", content="Out of credits", code="quota_exhausted")
        .add("error", "r1", "nobody-1", content="Lost agent")
        .finish("r1", "error", reason="model_error")
        .events
    )


def cancelled_run() -> list[Json]:
    return (
        Log()
        .start("r1", "mg1")
        .add("status", "r1", message="Thinking")
        .add("tool-call", "r1", toolCallId="c1", toolName="workflows", args={})
        .finish("r1", "cancelled", reason="user_cancelled")
        .events
    )


def interrupted_run() -> list[Json]:
    return (
        Log()
        .start("r1", "mg1")
        .add("text-block", "r1", text="Half")
        .finish("r1", "interrupted", reason="crash_interrupted")
        .events
    )


def cancelled_without_known_reason() -> list[Json]:
    return (
        Log()
        .start("r1", "mg1")
        .add("text-block", "r1", text="Half")
        .finish("r1", "cancelled", reason="restart_lost_confirmation")
        .events
    )


def two_runs_in_one_group() -> list[Json]:
    """A card's run ended, the group went on in a second run: it writes into the same root
    (named by the first run), which the new run-start makes active again."""
    args = {"action": "publish", "workflowId": "wf-1"}
    confirm: Json = {
        "requestId": "req-1",
        "toolCallId": "c1",
        "toolName": "workflows",
        "args": args,
        "severity": "warning",
        "message": "Publish?",
    }
    setup = [{"id": "s1", "kind": "credential", "credentialType": "slackApi"}]
    return (
        Log()
        .start("r1", "mg1")
        .add("text-block", "r1", text="Publishing needs your go.")
        .add("tool-call", "r1", toolCallId="c1", toolName="workflows", args=args)
        .add("confirmation-request", "r1", **confirm)
        .finish("r1", "cancelled", reason="timeout")
        .start("r2", "mg1")
        .add("tool-result", "r2", toolCallId="c1", result={"published": True})
        .add("text-block", "r2", text="Published.")
        .add("setup-items", "r2", workflowId="wf-1", items=setup)
        .finish("r2")
        .events
    )


def reasoning_blocks() -> list[Json]:
    return (
        Log()
        .start("r1", "mg1")
        .add("reasoning-block", "r1", text="The person wants a list.")
        .add("text-block", "r1", text="Here it is.")
        .add("reasoning-block", "r1", response_id="x", text="Check again.")
        .add("reasoning-block", "r1", response_id="x", text=" Fine.")
        .add("agent-spawned", "r1", "helper-1", parentId="orchestrator-r1", role="helper")
        .add("reasoning-block", "r1", "helper-1", text="Helping.")
        .finish("r1")
        .events
    )


def odd_events() -> list[Json]:
    """Before any run-start, unknown and refused ids, kinds n8n draws nothing for."""
    items = [{"id": "p1", "kind": "parameters", "nodeName": "Slack", "parameterNames": ["x"]}]
    return (
        Log()
        .add("error", "r1", content="Too early")
        .start("r1", "mg1")
        .add("text-block", "r1", text="Hi")
        .add("setup-items", "r1", workflowId="wf-1", items=items)
        .add("setup-items", "r1", "ghost", workflowId="wf-2", items=[])
        .add("setup-items", "r1", workflowId="wf-1", items=items + items)
        .add("preferences-applied", "r1", preferences=[], renderedLength=0, injectedThisTurn=True)
        .add("filesystem-request", "r1", requestId="f1", toolCall={"name": "ls", "arguments": {}})
        .add("made-up-kind", "r1", anything=1)
        .add("tool-call", "r1", toolCallId="__proto__", toolName="workflows", args={})
        .add("agent-spawned", "r1", "constructor", parentId="orchestrator-r1", role="x")
        .add("tool-call", "r1", "ghost", toolCallId="c1", toolName="workflows", args={})
        .add("text-block", "r1", "ghost", text="Nobody hears this")
        .finish("r1")
        .events
    )


def live_group() -> list[Json]:
    """A run still going: what a run-sync frame carries."""
    return (
        Log()
        .start("r1", "mg1")
        .add("text-delta", "r1", text="Let me ")
        .add("tool-input-start", "r1", toolCallId="c1", toolName="build-workflow")
        .events
    )


# Random sequences, to compare beyond the cases: any order, reused and refused ids, odd
# values, missing fields (ids stay strings, as the service's are).
_AGENTS = ("orchestrator-r1", "orchestrator-r2", "agent-001", "sub-1", "sub-2", "__proto__")
_ODD: tuple[Any, ...] = (None, "", "s", 0, 1, [], {}, {"k": 1}, [1], True, False)
_FIELDS: dict[str, tuple[str, ...]] = {
    "run-start": ("messageGroupId",),
    "run-finish": ("status", "reason"),
    "text-delta": ("text",),
    "reasoning-delta": ("text",),
    "text-block": ("text",),
    "reasoning-block": ("text",),
    "tool-input-start": ("toolCallId", "toolName"),
    "tool-call": ("toolCallId", "toolName", "args"),
    "tool-result": ("toolCallId", "result"),
    "tool-error": ("toolCallId", "error"),
    "tool-interrupted": ("toolCallId", "error"),
    "confirmation-request": ("toolCallId", "requestId", "message"),
    "tasks-update": ("tasks", "planItems"),
    "agent-spawned": ("parentId", "role", "title", "targetResource"),
    "agent-completed": ("status", "result", "error"),
    "status": ("message",),
    "error": ("content", "code"),
    "setup-items": ("workflowId", "items"),
    "made-up": ("anything",),
}
# Without these n8n's reducer throws (text) or files the event under "undefined" (a call id).
_ALWAYS = frozenset({"text", "toolCallId"})
_VALUES: dict[str, tuple[Any, ...]] = {
    "status": ("completed", "cancelled", "error", "interrupted", None),
    "reason": ("timeout", "service_shutdown", "user_cancelled", "crash_interrupted", "x"),
    "text": ("", "Hel", "Hello", "lo", "Hello world", "world"),
    "toolCallId": ("c1", "c2", "c3", "constructor"),
    "toolName": ("build-workflow", "load_skill", "task-control", "create-tasks", "other"),
    "parentId": _AGENTS,
    "targetResource": (
        {"type": "workflow", "id": "w"},
        {"type": "workflow", "id": "w", "name": "N"},
        {"type": "workflow", "id": "w", "name": None},
        {"type": "workflow"},
        None,
    ),
    "code": ("quota_exhausted", "other"),
    "workflowId": ("w1", "w2", "__proto__"),
}


def random_sequence(rng: random.Random) -> list[Json]:
    log = Log()
    for _ in range(rng.randint(1, 25)):
        kind = rng.choice(list(_FIELDS))
        payload = {
            key: rng.choice(_VALUES.get(key, _ODD))
            for key in _FIELDS[kind]
            if key in _ALWAYS or rng.random() < 0.85  # else missing: undefined to n8n
        }
        log.add(kind, "r1", rng.choice(_AGENTS), response_id=rng.choice(("", "", "a", "b")))
        log.events[-1]["payload"] = payload
        if rng.random() < 0.1:  # a Date from null, and from a fraction of a millisecond
            log.events[-1]["ts"] = rng.choice((None, T0 + 0.5))
    return log.events


RANDOM = [random_sequence(random.Random(seed)) for seed in range(400)]


CASES: dict[str, Callable[[], list[Json]]] = {
    f.__name__: f
    for f in (
        text_answer,
        streamed_segments,
        tool_call_and_result,
        tool_errors,
        confirmation_then_result,
        sub_agents,
        tasks_update,
        empty_plan,
        error_run,
        cancelled_run,
        interrupted_run,
        cancelled_without_known_reason,
        two_runs_in_one_group,
        reasoning_blocks,
        odd_events,
        live_group,
    )
}


# -- n8n's reducer ----------------------------------------------------------------------------


def _n8n_fold(requests: list[Json]) -> list[Json]:
    if not (CONTRACT / "node_modules" / "@n8n" / "api-types").is_dir():
        raise AssertionError("n8n's event contract is not installed; run `make contract`")
    result = subprocess.run(
        ["node", str(CONTRACT / "agent-tree.mjs")],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    trees: list[Json] = json.loads(result.stdout)
    return trees


@pytest.fixture(scope="module")
def n8n_trees() -> dict[tuple[str, bool], Json]:
    """n8n's tree of every case, plain and normalized, from one Node process."""
    keys = [(name, normalize) for name in CASES for normalize in (False, True)]
    requests = [{"events": CASES[name](), "normalize": normalize} for name, normalize in keys]
    keys += [(f"random-{i}", True) for i in range(len(RANDOM))]
    requests += [{"events": events, "normalize": True} for events in RANDOM]
    return dict(zip(keys, _n8n_fold(requests), strict=True))


def _as_json(value: Any) -> Any:
    """What the editor receives: JSON text, read back (object key order is not compared)."""
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("name", list(CASES))
def test_agent_tree_is_n8ns(name: str, n8n_trees: dict[tuple[str, bool], Json]) -> None:
    tree = agent_tree(CASES[name]())
    assert _as_json(tree) == n8n_trees[name, False]
    normalize_agent_tree(tree)
    assert _as_json(tree) == n8n_trees[name, True]


def test_agent_tree_is_n8ns_on_random_sequences(n8n_trees: dict[tuple[str, bool], Json]) -> None:
    for i, events in enumerate(RANDOM):
        tree = agent_tree(events)
        normalize_agent_tree(tree)
        assert _as_json(tree) == n8n_trees[f"random-{i}", True], json.dumps(events)


def test_the_cases_reach_every_rule(n8n_trees: dict[tuple[str, bool], Json]) -> None:
    """The differential cases are worth comparing: n8n's trees show what they are about."""
    trees = {name: n8n_trees[name, False] for name in CASES}
    assert trees["text_answer"]["textContent"] == "Hello world"
    assert trees["streamed_segments"]["textContent"] == "HelloBye now, reallyUnanswered"
    builder = trees["sub_agents"]["children"][0]
    assert builder["targetResource"]["name"] == "Slack digest"
    assert trees["sub_agents"]["children"][1]["status"] == "error"
    assert "*Error: The model is overloaded*" in trees["error_run"]["textContent"]
    assert "Out of credits" not in trees["error_run"]["textContent"]
    assert trees["cancelled_run"]["cancellationReason"] == "user"
    assert "cancellationReason" not in trees["cancelled_without_known_reason"]
    two = trees["two_runs_in_one_group"]
    assert (two["agentId"], two["status"], two["cancellationReason"]) == (
        "orchestrator-r1",
        "completed",
        "timeout",
    )
    assert two["latestSetupAnnouncement"]["agentId"] == "orchestrator-r1"
    assert trees["odd_events"]["agentId"] == "agent-001"
    assert trees["empty_plan"]["planItems"] == []


def test_normalize_puts_legacy_reasoning_first() -> None:
    child: Json = {
        "agentId": "c",
        "reasoning": "old",
        "children": [],
        "toolCalls": [],
        "timeline": [{"type": "text", "content": "t"}],
    }
    tree: Json = {
        "agentId": "root",
        "reasoning": "",
        "children": [child],
        "toolCalls": [],
        "timeline": [],
    }
    normalize_agent_tree(tree)
    normalize_agent_tree(tree)  # once is enough
    assert tree["timeline"] == []
    assert child["timeline"] == [
        {"type": "reasoning", "content": "old"},
        {"type": "text", "content": "t"},
    ]


def test_only_unanswered_cards_without_a_live_request_expire() -> None:
    args = {"id": "wf-1"}
    events = Log().start("r1", "mg1")
    for n in (1, 2, 3):
        events.add("tool-call", "r1", toolCallId=f"c{n}", toolName="workflows", args=args)
        events.add(
            "confirmation-request",
            "r1",
            requestId=f"req-{n}",
            toolCallId=f"c{n}",
            toolName="workflows",
            args=args,
            severity="info",
            message="Go?",
        )
    events.add("tool-result", "r1", toolCallId="c3", result="done")
    tree = agent_tree(events.events)
    tree["toolCalls"][1]["confirmationStatus"] = "approved"  # answered in this browser
    expire_confirmations(tree, {"req-9"})
    assert [c["confirmation"].get("expired") for c in tree["toolCalls"]] == [True, None, None]
    fresh = agent_tree(events.events)
    expire_confirmations(fresh, {"req-1"})
    assert "expired" not in fresh["toolCalls"][0]["confirmation"]


# -- rich_messages ----------------------------------------------------------------------------


def _said(role: str, run: str, group: str, text: str, ms: int, **extra: Any) -> Said:
    message_id = extra.pop("id", f"msg-{run}" if role == "user" else run)
    return Said(
        id=message_id,
        role=role,
        run_id=run,
        message_group_id=group,
        text=text,
        created_at=js_iso(ms),
        **extra,
    )


def test_turns_in_order_with_trees_on_answers() -> None:
    log = Log().start("r1", "mg1").add("text-block", "r1", text="Hi there").finish("r1")
    log.start("r2", "mg2").add("text-block", "r2", text="Sure").finish("r2")
    said = [
        _said("user", "r1", "mg1", "Hello", T0 + 500),
        _said("assistant", "r1", "mg1", "Hi there", T0 + 2000),
        _said("user", "r2", "mg2", "List them", T0 + 3500),
        _said("assistant", "r2", "mg2", "Sure", T0 + 5000),
    ]
    messages = rich_messages(said, log.events, live_runs=set())
    assert [(m["role"], m["id"]) for m in messages] == [
        ("user", "msg-r1"),
        ("assistant", "r1"),
        ("user", "msg-r2"),
        ("assistant", "r2"),
    ]
    assert messages[0] == {
        "id": "msg-r1",
        "role": "user",
        "createdAt": "2026-01-01T00:00:00.500Z",
        "content": "Hello",
        "reasoning": "",
        "isStreaming": False,
    }
    answer = messages[1]
    tree = answer.pop("agentTree")
    assert answer == {
        "id": "r1",
        "runId": "r1",
        "messageGroupId": "mg1",
        "runIds": ["r1"],
        "role": "assistant",
        "createdAt": "2026-01-01T00:00:02.000Z",
        "content": "Hi there",
        "reasoning": "",
        "isStreaming": False,
    }
    assert (tree["agentId"], tree["textContent"], tree["status"]) == (
        "orchestrator-r1",
        "Hi there",
        "completed",
    )


def test_a_live_group_is_left_to_the_event_stream() -> None:
    log = Log().start("r1", "mg1").add("text-block", "r1", text="Done").finish("r1")
    log.start("r2", "mg2").add("text-block", "r2", text="Still going")
    said = [
        _said("user", "r1", "mg1", "One", T0 + 500),
        _said("assistant", "r1", "mg1", "Done", T0 + 2000),
        _said("user", "r2", "mg2", "Two", T0 + 3500),
        _said("assistant", "r2", "mg2", "Still going", T0 + 5000),
    ]
    messages = rich_messages(said, log.events, live_runs={"r2"})
    assert [m["id"] for m in messages] == ["msg-r1", "r1", "msg-r2", "r2"]
    live = messages[3]
    assert "agentTree" not in live and "runIds" not in live
    # Named by its group, so the run-sync frame's tree lands on it.
    assert (live["runId"], live["messageGroupId"]) == ("r2", "mg2")
    without_answer = rich_messages(said[:3], log.events, live_runs={"r2"})
    assert [m["id"] for m in without_answer] == ["msg-r1", "r1", "msg-r2"]


def test_a_group_without_a_text_answer_is_a_message_of_its_own() -> None:
    log = Log().start("r1", "mg1")
    log.add("tool-call", "r1", toolCallId="c1", toolName="workflows", args={})
    log.add("tool-result", "r1", toolCallId="c1", result=[]).finish("r1")
    log.start("r2", "mg2").add("text-block", "r2", text="Next").finish("r2")
    said = [
        _said("user", "r1", "mg1", "Do it quietly", T0 + 500),
        _said("user", "r2", "mg2", "And now?", T0 + 9000),
        _said("assistant", "r2", "mg2", "Next", T0 + 11000),
    ]
    messages = rich_messages(said, log.events, live_runs=set())
    assert [(m["role"], m["id"]) for m in messages] == [
        ("user", "msg-r1"),
        ("assistant", "mg1"),
        ("user", "msg-r2"),
        ("assistant", "r2"),
    ]
    alone = messages[1]
    assert alone["runId"] == "r1" and alone["runIds"] == ["r1"]
    assert alone["messageGroupId"] == "mg1"
    assert alone["createdAt"] == js_iso(T0 + 4000)  # when the group last wrote
    assert (alone["content"], alone["reasoning"], alone["isStreaming"]) == ("", "", False)
    assert alone["agentTree"]["toolCalls"][0]["result"] == []


def test_the_answers_of_one_group_collapse_into_the_last() -> None:
    log = Log().start("r1", "mg1").add("text-block", "r1", text="First").finish("r1")
    log.start("r2", "mg1").add("text-block", "r2", text="Second").finish("r2")
    said = [
        _said("user", "r1", "mg1", "Go", T0 + 500),
        _said("assistant", "r1", "mg1", "First", T0 + 2000),
        _said("assistant", "r2", "mg1", "Second", T0 + 5000),
    ]
    messages = rich_messages(said, log.events, live_runs=set())
    assert [m["id"] for m in messages] == ["msg-r1", "r2"]
    last = messages[1]
    assert (last["runId"], last["runIds"], last["content"]) == ("r2", ["r1", "r2"], "Second")
    assert last["agentTree"]["textContent"] == "FirstSecond"


def test_a_group_with_no_message_sits_where_its_time_puts_it() -> None:
    log = Log().start("r0", "mg0").add("text-block", "r0", text="Long ago").finish("r0")
    log.ts = T0 + 10_000
    log.start("r1", "mg1").add("text-block", "r1", text="Hi").finish("r1")
    log.start("bg", "mg-bg").add("text-block", "bg", text="Background done").finish("bg")
    log.start("r2", "mg2").add("text-block", "r2", text="Later").finish("r2")
    said = [
        _said("user", "r1", "mg1", "Hello", T0 + 10_500),
        _said("assistant", "r1", "mg1", "Hi", T0 + 12_000),
        _said("user", "r2", "mg2", "More", T0 + 16_500),
        _said("assistant", "r2", "mg2", "Later", T0 + 18_000),
    ]
    messages = rich_messages(said, log.events, live_runs=set())
    # mg0 is older than the page's oldest message: it belongs to an older page.
    assert [m["id"] for m in messages] == ["msg-r1", "r1", "mg-bg", "msg-r2", "r2"]
    assert messages[2]["content"] == "Background done"
    older_page = rich_messages(
        said[:2], log.events, live_runs=set(), newer_boundary=js_iso(T0 + 16_500)
    )
    assert [m["id"] for m in older_page] == ["msg-r1", "r1", "mg-bg"]
    assert rich_messages([], log.events, live_runs=set(), newer_boundary=js_iso(T0)) == []


def test_user_messages_keep_only_what_n8n_can_show() -> None:
    pointed = {"type": "workflow", "id": "wf-1", "name": "Digest"}
    file = {"name": "orders.csv", "mimeType": "text/csv", "size": 120}
    said = [
        _said("user", "r1", "mg1", "Read these", T0, attachments=[file, pointed]),
        _said("user", "r2", "mg2", "Just files", T0 + 1, attachments=[file]),
    ]
    first, second = rich_messages(said, [], live_runs=set())
    assert first["attachments"] == [pointed]
    assert "attachments" not in second


def test_stale_cards_in_history_are_expired() -> None:
    args = {"id": "wf-1"}
    log = Log().start("r1", "mg1")
    log.add("tool-call", "r1", toolCallId="c1", toolName="workflows", args=args)
    log.add(
        "confirmation-request",
        "r1",
        requestId="req-1",
        toolCallId="c1",
        toolName="workflows",
        args=args,
        severity="warning",
        message="Publish?",
    ).finish("r1")
    said = [_said("user", "r1", "mg1", "Publish it", T0 + 500)]
    _, card = rich_messages(said, log.events, live_runs=set())
    assert card["agentTree"]["toolCalls"][0]["confirmation"]["expired"] is True
    _, waiting = rich_messages(said, log.events, live_runs=set(), pending_requests={"req-1"})
    assert "expired" not in waiting["agentTree"]["toolCalls"][0]["confirmation"]


def test_next_event_id() -> None:
    assert next_event_id(0) == 1
    assert next_event_id(41) == 42


def test_times_are_written_as_n8n_writes_them() -> None:
    said = Said(
        id="m",
        role="user",
        run_id="r",
        message_group_id="",
        text="x",
        created_at="2026-01-01T01:00:01.5+01:00",
    )
    (message,) = rich_messages([said], [], live_runs=set())
    assert message["createdAt"] == "2026-01-01T00:00:01.500Z"
