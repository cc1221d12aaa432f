"""The agent tree n8n's editor draws for one assistant turn, folded from that turn's events.

n8n 2.41.1 keeps no tree: on reload its backend replays the events of a message group through
the reducer of `@n8n/api-types` (`buildAgentTreeFromEvents`) and sends the result as an
assistant message's `agentTree` (and in the SSE `run-sync` frame). The editor then keeps
reducing live events onto that tree, so ours must be the very tree n8n would build: the same
keys, the same omitted keys, the same timeline and status rules. `tests/test_bridge_agent_tree.py`
folds the same events here and in n8n's reducer and compares the two.

A tree is plain JSON (`dict`). Values taken from event payloads (tool args and results,
tasks, setup items) are shared with the events, not copied: nothing here mutates them.

Where n8n's reducer reads a missing payload field it gets `undefined`, which JSON drops; a
field sent as `null` stays `null`. `_ABSENT` keeps that difference. Where it would throw on a
malformed payload (text that is not a string), we coerce instead: one bad event must not cost
the person their whole history."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeGuard

__all__ = [
    "Event",
    "Json",
    "agent_tree",
    "expire_confirmations",
    "js_iso",
    "normalize_agent_tree",
    "render_hint",
    "tree_has_content",
]

Json = dict[str, Any]
Event = Mapping[str, Any]

# n8n refuses these as ids: they would reach Object.prototype in its id-keyed maps.
_UNSAFE_KEYS: Final = frozenset({"__proto__", "constructor", "prototype"})
# Errors the editor shows on its own (a quota banner), not as text in the answer.
_QUIET_ERROR_CODES: Final = frozenset({"quota_exhausted"})
# n8n's root before any run-start names one (`createInitialState()`).
_DEFAULT_ROOT: Final = "agent-001"
_CANCELLATION_REASONS: Final = {
    "timeout": "timeout",
    "service_shutdown": "shutdown",
    "user_cancelled": "user",
    "crash_interrupted": "interrupted",
}
_SKILL_TOOLS: Final = frozenset(
    {"create_skills", "list_skills", "read_skill", "update_skill", "load_skill"}
)
_RENDER_HINTS: Final = {
    "task-control": "tasks",
    "build-workflow": "builder",
    "build-workflow-with-agent": "builder",
    "research-with-agent": "researcher",
    "create-tasks": "planner",
    "eval-setup-with-agent": "eval-setup",
}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class _Absent:
    """A field the event does not have: JavaScript's `undefined`."""

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Final = _Absent()


# -- JavaScript's reading of JSON values ----------------------------------------------------


def _get(source: Any, key: str) -> Any:
    """`source.key` as JavaScript reads it: `_ABSENT` for a missing key or a non-object."""
    return source.get(key, _ABSENT) if isinstance(source, Mapping) else _ABSENT


def _truthy(value: Any) -> bool:
    """JavaScript's truthiness: unlike Python's, empty objects and arrays are true."""
    if value is _ABSENT or value is None:
        return False
    if isinstance(value, bool | int | float | str):
        return bool(value) and value == value  # NaN is false
    return True


def _nullish_or(value: Any, fallback: Any) -> Any:
    """`value ?? fallback`."""
    return fallback if value is _ABSENT or value is None else value


def _put(target: Json, key: str, value: Any) -> None:
    """`target.key = value`: an absent value leaves no key behind, as JSON.stringify drops
    `undefined`."""
    if value is _ABSENT:
        target.pop(key, None)
    else:
        target[key] = value


def _js_string(value: Any) -> str:
    """What `'' + value` gives for the values an event can carry (numbers as Python writes
    them where JavaScript differs: exponents, for one)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is _ABSENT or value is None:
        return "undefined" if value is _ABSENT else "null"
    if isinstance(value, list):  # elements joined by commas, null and undefined as nothing
        return ",".join("" if v is None else _js_string(v) for v in value)
    if isinstance(value, Mapping):
        return "[object Object]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _refused(value: Any) -> bool:
    return isinstance(value, str) and value in _UNSAFE_KEYS


def _is_key(value: Any) -> TypeGuard[str]:
    """An id n8n files things under. Ids are strings in n8n's schema; anything else is
    treated as no id."""
    return isinstance(value, str) and value not in _UNSAFE_KEYS


def _length(value: Any) -> int:
    return len(value) if isinstance(value, str | list) else 0


def js_iso(ms: int) -> str:
    """`new Date(ms).toISOString()`: UTC, milliseconds, `Z` (years 1-9999)."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _event_time(event: Event) -> str:
    """When the event happened, as the reducer stamps tool calls: its `ts`, else now."""
    ts = event.get("ts", _ABSENT)
    if ts is None:  # new Date(null) is the epoch
        return js_iso(0)
    if isinstance(ts, int | float) and not isinstance(ts, bool) and ts == ts:
        return js_iso(int(ts))  # a Date drops fractions of a millisecond toward zero
    return js_iso(int(datetime.now(UTC).timestamp() * 1000))


def render_hint(tool_name: Any) -> str:
    """Which card the editor draws for a tool call (n8n's `getRenderHint`)."""
    if not isinstance(tool_name, str):
        return "default"
    if tool_name in _SKILL_TOOLS:
        return "skill"
    return _RENDER_HINTS.get(tool_name, "default")


# -- nodes ----------------------------------------------------------------------------------


def _node(agent_id: str, role: Any) -> Json:
    node: Json = {"agentId": agent_id}
    _put(node, "role", role)
    node |= {
        "status": "active",
        "textContent": "",
        "reasoning": "",
        "toolCalls": [],
        "children": [],
        "timeline": [],
    }
    return node


def tree_has_content(node: Json | None) -> bool:
    """Whether a node shows anything. n8n asks this twice with the same fields: may a second
    run-start start afresh (`nodeHasContent`), and may a folded tree be attached to a stored
    message (`isRenderableTree`)."""
    if node is None:
        return False
    shown = ("textContent", "reasoning", "timeline", "toolCalls", "children", "planItems")
    flagged = ("statusMessage", "result", "error", "tasks", "setupItemsByWorkflowId")
    return any(_length(node.get(k)) > 0 for k in shown) or any(
        _truthy(node.get(k, _ABSENT)) for k in flagged
    )


def _walk(node: Json) -> Iterator[Json]:
    yield node
    for child in node["children"]:
        yield from _walk(child)


def normalize_agent_tree(tree: Json) -> None:
    """n8n's `normalizeAgentTree`, in place: a node with reasoning but no reasoning entry in
    its timeline (trees from before the timeline had them) gets one at the front. The messages
    route applies it; the SSE `run-sync` frame does not."""
    for node in _walk(tree):
        has_entry = any(entry.get("type") == "reasoning" for entry in node["timeline"])
        if _truthy(node.get("reasoning", _ABSENT)) and not has_entry:
            node["timeline"].insert(0, {"type": "reasoning", "content": node["reasoning"]})


def expire_confirmations(tree: Json, live_request_ids: Collection[str]) -> None:
    """Flag `confirmation.expired` on every card still waiting for an answer that no live
    pending confirmation backs any more, in place, so the editor shows it as expired
    instead of offering buttons that can no longer resume anything (n8n's
    `markExpiredConfirmations`)."""
    for node in _walk(tree):
        for call in node["toolCalls"]:
            confirmation = call.get("confirmation")
            answered = call.get("confirmationStatus") in ("approved", "denied")
            if not isinstance(confirmation, dict) or not _truthy(call.get("isLoading")) or answered:
                continue
            request_id = confirmation.get("requestId")
            if not (isinstance(request_id, str) and request_id in live_request_ids):
                confirmation["expired"] = True


# -- the fold -------------------------------------------------------------------------------


class _Fold:
    """The reducer's state. `agents` may hold the root under several ids: every later run of
    the group speaks as its own orchestrator, and they all write into the first one's node."""

    def __init__(self) -> None:
        self.root_id = _DEFAULT_ROOT
        self.agents: dict[str, Json] = {_DEFAULT_ROOT: _node(_DEFAULT_ROOT, "orchestrator")}
        self.tool_calls: dict[str, Json] = {}

    def agent(self, agent_id: Any) -> Json | None:
        return self.agents.get(agent_id) if _is_key(agent_id) else None

    def root(self) -> Json | None:
        return self.agents.get(self.root_id)

    def tree(self) -> Json:
        return self.root() or _node(self.root_id, "unknown")


def _payload(event: Event) -> Mapping[str, Any]:
    payload = event.get("payload")
    return payload if isinstance(payload, Mapping) else {}


def _append_entry(timeline: list[Json], kind: str, text: str, response_id: Any) -> None:
    """Text runs on in the last entry of its kind and answer; anything else opens an entry."""
    last = timeline[-1] if timeline else None
    if last is not None and last["type"] == kind and last.get("responseId", _ABSENT) == response_id:
        last["content"] += text
        return
    entry: Json = {"type": kind, "content": text}
    if _truthy(response_id):
        entry["responseId"] = response_id
    timeline.append(entry)


def _append(agent: Json, field: str, kind: str, text: str, response_id: Any) -> None:
    agent[field] += text
    _append_entry(agent["timeline"], kind, text, response_id)


def _run_start(fold: _Fold, event: Event) -> None:
    agent_id = event.get("agentId")
    if not _is_key(agent_id):
        return
    root = fold.root()
    if len(fold.agents) > 1 or tree_has_content(root):
        # A further run of the same group (a resumed card, a follow-up): it continues the
        # tree, its orchestrator id becoming another name of the root.
        if root is not None:
            root["status"] = "active"
            if agent_id != fold.root_id:
                fold.agents[agent_id] = root
        return
    fold.root_id = agent_id
    fold.agents = {agent_id: _node(agent_id, "orchestrator")}
    fold.tool_calls = {}


def _delta(field: str, kind: str) -> Callable[[_Fold, Event], None]:
    def apply(fold: _Fold, event: Event) -> None:
        agent = fold.agent(event.get("agentId"))
        if agent is not None:
            text = _js_string(_get(_payload(event), "text"))
            _append(agent, field, kind, text, event.get("responseId", _ABSENT))

    return apply


def _block(field: str, kind: str) -> Callable[[_Fold, Event], None]:
    """A whole persisted segment. Replayed after the deltas of the same answer were already
    seen (a client that was live), it replaces that open segment instead of repeating it."""

    def apply(fold: _Fold, event: Event) -> None:
        agent = fold.agent(event.get("agentId"))
        if agent is None:
            return
        text = _js_string(_get(_payload(event), "text"))
        response_id = event.get("responseId", _ABSENT)
        last = agent["timeline"][-1] if agent["timeline"] else None
        is_open = (
            last is not None
            and last["type"] == kind
            and response_id is not _ABSENT
            and last.get("responseId", _ABSENT) == response_id
            and (text.startswith(last["content"]) or text.endswith(last["content"]))
        )
        if last is not None and is_open and agent[field].endswith(last["content"]):
            agent[field] = agent[field][: len(agent[field]) - len(last["content"])] + text
            last["content"] = text
        else:
            _append(agent, field, kind, text, response_id)

    return apply


def _add_tool_call(fold: _Fold, agent: Json, event: Event, args: Any) -> None:
    payload = _payload(event)
    call: Json = {"toolCallId": payload["toolCallId"]}
    _put(call, "toolName", _get(payload, "toolName"))
    _put(call, "args", args)
    call |= {
        "isLoading": True,
        "renderHint": render_hint(_get(payload, "toolName")),
        "startedAt": _event_time(event),
    }
    fold.tool_calls[call["toolCallId"]] = call
    agent["toolCalls"].append(call)
    entry: Json = {"type": "tool-call", "toolCallId": call["toolCallId"]}
    if _truthy(event.get("responseId", _ABSENT)):
        entry["responseId"] = event["responseId"]
    agent["timeline"].append(entry)


def _tool_input_start(fold: _Fold, event: Event) -> None:
    call_id = _get(_payload(event), "toolCallId")
    if not _is_key(call_id) or call_id in fold.tool_calls:
        return
    agent = fold.agent(event.get("agentId"))
    if agent is not None:
        _add_tool_call(fold, agent, event, {})


def _tool_call(fold: _Fold, event: Event) -> None:
    payload = _payload(event)
    call_id = _get(payload, "toolCallId")
    if not _is_key(call_id):
        return
    announced = fold.tool_calls.get(call_id)
    if announced is not None:  # announced by tool-input-start: now its arguments are known
        _put(announced, "args", _get(payload, "args"))
        return
    agent = fold.agent(event.get("agentId"))
    if agent is not None:
        _add_tool_call(fold, agent, event, _get(payload, "args"))


def _tool_outcome(field: str) -> Callable[[_Fold, Event], None]:
    """A result, an error, or an interruption (reported as an error) ends the call."""

    def apply(fold: _Fold, event: Event) -> None:
        payload = _payload(event)
        call_id = _get(payload, "toolCallId")
        call = fold.tool_calls.get(call_id) if _is_key(call_id) else None
        if call is not None:
            _put(call, field, _get(payload, field))
            call["isLoading"] = False
            call["completedAt"] = _event_time(event)

    return apply


def _agent_spawned(fold: _Fold, event: Event) -> None:
    payload = _payload(event)
    agent_id, parent_id = event.get("agentId"), _get(payload, "parentId")
    # A missing parent is no reason to ignore a re-announcement; it only finds no parent.
    if not _is_key(agent_id) or _refused(parent_id):
        return
    existing = fold.agents.get(agent_id)
    if existing is not None:
        _retarget(existing, _get(payload, "targetResource"))
        return
    parent = fold.agent(parent_id)
    if parent is None:
        return
    child = _node(agent_id, _get(payload, "role"))
    for key in ("tools", "taskId", "kind", "title", "subtitle", "goal", "targetResource"):
        _put(child, key, _get(payload, key))
    fold.agents[agent_id] = child
    parent["children"].append(child)
    # The child's entry belongs to the answer the parent was giving when it spawned it.
    previous = parent["timeline"][-1].get("responseId", _ABSENT) if parent["timeline"] else _ABSENT
    response_id = _nullish_or(event.get("responseId", _ABSENT), previous)
    entry: Json = {"type": "child", "agentId": agent_id}
    if _truthy(response_id):
        entry["responseId"] = response_id
    parent["timeline"].append(entry)


def _retarget(node: Json, incoming: Any) -> None:
    """A sub-agent announced again for the same resource: take the newer description,
    keeping the name it had when the new one has none."""
    current = node.get("targetResource", _ABSENT)
    if not _truthy(incoming) or _get(incoming, "id") != _get(current, "id"):
        return
    updated: Json = dict(incoming) if isinstance(incoming, Mapping) else {}
    _put(updated, "name", _nullish_or(_get(incoming, "name"), _get(current, "name")))
    node["targetResource"] = updated


def _agent_completed(fold: _Fold, event: Event) -> None:
    agent = fold.agent(event.get("agentId"))
    if agent is None:
        return
    payload = _payload(event)
    error = _get(payload, "error")
    agent["status"] = _nullish_or(
        _get(payload, "status"), "error" if _truthy(error) else "completed"
    )
    _put(agent, "result", _get(payload, "result"))
    _put(agent, "error", error)
    for call in agent["toolCalls"]:  # its unfinished calls will not finish now
        call["isLoading"] = False


def _confirmation_request(fold: _Fold, event: Event) -> None:
    payload = _payload(event)
    call_id = _get(payload, "toolCallId")
    call = fold.tool_calls.get(call_id) if _is_key(call_id) else None
    if call is not None:
        call["confirmation"] = {
            k: v for k, v in payload.items() if k not in ("toolCallId", "toolName", "args")
        }


def _tasks_update(fold: _Fold, event: Event) -> None:
    agent = fold.agent(event.get("agentId"))
    if agent is not None:
        payload = _payload(event)
        _put(agent, "tasks", _get(payload, "tasks"))
        if _truthy(_get(payload, "planItems")):  # an update without a plan keeps the plan
            agent["planItems"] = payload["planItems"]


def _setup_items(fold: _Fold, event: Event) -> None:
    """Setup cards live on the root, whoever announced them, one list per workflow."""
    payload = _payload(event)
    root, workflow_id = fold.agent(fold.root_id), _get(payload, "workflowId")
    if root is None or _refused(workflow_id):
        return
    speaker = fold.agent(event.get("agentId"))
    announcement: Json = {}
    _put(announcement, "workflowId", workflow_id)
    _put(announcement, "agentId", speaker["agentId"] if speaker else event.get("agentId", _ABSENT))
    announcement["timestamp"] = _event_time(event)
    root["latestSetupAnnouncement"] = announcement
    by_workflow: Json = dict(root.get("setupItemsByWorkflowId") or {})
    # n8n files the list under the id as text, whatever the event carried.
    _put(by_workflow, _js_string(workflow_id), _get(payload, "items"))
    root["setupItemsByWorkflowId"] = by_workflow


def _status(fold: _Fold, event: Event) -> None:
    agent = fold.agent(event.get("agentId"))
    if agent is not None:
        message = _get(_payload(event), "message")
        _put(agent, "statusMessage", message if _truthy(message) else _ABSENT)


def _error(fold: _Fold, event: Event) -> None:
    payload = _payload(event)
    code = _get(payload, "code")
    if isinstance(code, str) and code in _QUIET_ERROR_CODES:
        return
    # An error nobody can place (no known agent) still reaches the person, on the root.
    agent = fold.agent(event.get("agentId")) or fold.root()
    if agent is not None:
        text = "\n\n*Error: " + _js_string(_get(payload, "content")) + "*"
        _append(agent, "textContent", "text", text, event.get("responseId", _ABSENT))


def _run_finish(fold: _Fold, event: Event) -> None:
    payload = _payload(event)
    outcome = _get(payload, "status")
    if outcome == "completed":
        status = "completed"
    elif outcome in ("cancelled", "interrupted"):
        status = "cancelled"
    else:
        status = "error"
    root = fold.root()
    if root is not None:
        root["status"] = status
        if status == "cancelled":
            reason = _get(payload, "reason")
            category = _CANCELLATION_REASONS.get(reason) if isinstance(reason, str) else None
            _put(root, "cancellationReason", category or _ABSENT)
    if status != "completed":  # nothing still running will report back
        for call in fold.tool_calls.values():
            call["isLoading"] = False


# Types n8n's reducer knows but draws nothing for (thread-title-updated, preferences-applied,
# filesystem-request) are left out, as are unknown ones: all are ignored alike.
_HANDLERS: Final[dict[str, Callable[[_Fold, Event], None]]] = {
    "run-start": _run_start,
    "run-finish": _run_finish,
    "text-delta": _delta("textContent", "text"),
    "reasoning-delta": _delta("reasoning", "reasoning"),
    "text-block": _block("textContent", "text"),
    "reasoning-block": _block("reasoning", "reasoning"),
    "tool-input-start": _tool_input_start,
    "tool-call": _tool_call,
    "tool-result": _tool_outcome("result"),
    "tool-error": _tool_outcome("error"),
    "tool-interrupted": _tool_outcome("error"),
    "agent-spawned": _agent_spawned,
    "agent-completed": _agent_completed,
    "confirmation-request": _confirmation_request,
    "tasks-update": _tasks_update,
    "setup-items": _setup_items,
    "status": _status,
    "error": _error,
}


def agent_tree(events: Iterable[Event]) -> Json:
    """The tree (InstanceAiAgentNode) n8n's `buildAgentTreeFromEvents` folds from the events of
    one message group, oldest first. Not normalized: see `normalize_agent_tree`."""
    fold = _Fold()
    for event in events:
        kind = event.get("type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(fold, event)
    return fold.tree()
