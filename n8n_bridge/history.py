"""A thread's conversation in the shape n8n's editor reloads it from: the `messages` of
`GET /rest/instance-ai/threads/:threadId/messages` (n8n's `InstanceAiMessage[]`).

n8n stores the person's messages and the assistant's text answers, and rebuilds everything else
from its event log: the events of each message group (the runs of one turn: the first run, a
run resumed by a card, ...) are folded into an agent tree, and each tree rides on the
assistant message of its turn. Our service gives the same two halves: the messages
(`ListMessages`, here `Said`) and the event log (`StreamEvents`).

Where n8n matches a tree to a stored message by time, we match by ids, which we have: every
message of ours names its run and message group. The rest follows n8n's message building
(`parseStoredMessages` in its `message-parser.js`): a tree for a group without a text answer
becomes an assistant message of its own, the messages of one group collapse into the last,
and trees are normalized and their stale cards flagged expired."""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from n8n_bridge.agent_tree import (
    Event,
    Json,
    agent_tree,
    expire_confirmations,
    js_iso,
    normalize_agent_tree,
    tree_has_content,
)

__all__ = ["Said", "next_event_id", "rich_messages"]

# The `type`s of the attachments n8n gives back on a person's message. It gives back only
# what the person pointed at in the editor (recovered from the message's context block), never
# a file: its file attachment carries the file itself (base64 `data`), which n8n does not keep
# for history. Ours, a file's name, MIME type and size, fit no shape it has, so they are left
# out; anything already in one of these shapes passes.
_RESOURCE_ATTACHMENTS: Final = frozenset({"workflow", "agent", "nodes"})
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)


@dataclass(frozen=True, kw_only=True)
class Said:
    """A message of the conversation as our service lists it, oldest first."""

    # A person's message: the client's message id. The assistant's answer: its run id.
    id: str
    role: str  # "user" | "assistant"; anything else is not shown, as in n8n
    run_id: str
    message_group_id: str  # the run-start's messageGroupId; "" when it had none
    text: str
    created_at: str  # ISO 8601
    attachments: list[dict[str, Any]] = field(default_factory=list)


@dataclass(kw_only=True)
class _Group:
    """The events of one message group, in log order."""

    key: str  # its messageGroupId, else its only run's id
    message_group_id: str | None
    run_ids: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # n8n's two times of a group: when its first run last wrote (where the group sits among
    # the messages), and when it last wrote at all (the createdAt of its own message).
    anchor_ms: int | None = None
    last_ms: int | None = None

    def add(self, run_id: str, event: Event) -> None:
        if run_id not in self.run_ids:
            self.run_ids.append(run_id)
        self.events.append(event)
        ts = _event_ms(event)
        if ts is None:
            return
        if run_id == self.run_ids[0]:
            self.anchor_ms = ts if self.anchor_ms is None else max(self.anchor_ms, ts)
        self.last_ms = ts if self.last_ms is None else max(self.last_ms, ts)


@dataclass(frozen=True, kw_only=True)
class _Snapshot:
    group: _Group
    tree: Json


def next_event_id(last_event_id: int) -> int:
    """The `nextEventId` of the messages answer: one past the newest persisted event (1 for an
    empty log). The editor streams from `nextEventId - 1` on."""
    return max(last_event_id, 0) + 1


def rich_messages(
    said: Sequence[Said],
    events: Iterable[Event],
    *,
    live_runs: Collection[str],
    pending_requests: Collection[str] = frozenset(),
    newer_boundary: str | None = None,
) -> list[Json]:
    """n8n's `InstanceAiMessage` list for one page of messages.

    `said`: the page's messages, oldest first. `events`: the thread's events in n8n's shape,
    oldest first. `live_runs`: runs still going (active, suspended on a card, background
    tasks): their groups are left out, the editor gets those trees live through the event
    stream's `run-sync`. `pending_requests`: request ids of cards still waiting for an answer;
    a card outside them that still looks actionable is flagged expired (in a finished group
    none can be live, so the default is right for history). `newer_boundary`: for a page
    other than the newest, the createdAt of the next newer message: groups with no message of
    their own are shown on the page whose time span holds them, as n8n does."""
    groups = _group_events(events)
    run_keys = {run: group.key for group in groups.values() for run in group.run_ids}
    keys = [run_keys.get(s.run_id) or s.message_group_id or s.run_id for s in said]
    live = {k for k, g in groups.items() if any(r in live_runs for r in g.run_ids)}
    live |= {k for s, k in zip(said, keys, strict=True) if s.run_id in live_runs}
    said_keys = set(keys)
    drawn = {k: g for k, g in groups.items() if k not in live and _has_content(g)}
    orphans = _orphans(drawn, said_keys, said, newer_boundary)
    # Only the page's groups are folded: the thread's others are not shown on this page.
    on_page = [g for k, g in drawn.items() if k in said_keys] + orphans
    snapshots = {g.key: _Snapshot(group=g, tree=agent_tree(g.events)) for g in on_page}
    messages = _interleave(said, keys, snapshots, live, [snapshots[g.key] for g in orphans])
    _propagate_group_ids(messages)
    messages = _collapse_groups(messages)
    for message in messages:
        if tree := message.get("agentTree"):
            normalize_agent_tree(tree)
            expire_confirmations(tree, pending_requests)
    return messages


# -- groups ---------------------------------------------------------------------------------


def _event_ms(event: Event) -> int | None:
    ts = event.get("ts")
    if isinstance(ts, int | float) and not isinstance(ts, bool) and ts == ts:
        return int(ts)
    return None


def _group_events(events: Iterable[Event]) -> dict[str, _Group]:
    """Events by message group, in the order the groups first appear. A run's group is named
    by its run-start, which other events of the run need not follow."""
    events = list(events)
    group_of_run: dict[str, str] = {}
    for event in events:
        if event.get("type") != "run-start":
            continue
        run_id, payload = event.get("runId"), event.get("payload")
        group_id = payload.get("messageGroupId") if isinstance(payload, Mapping) else None
        if isinstance(run_id, str) and isinstance(group_id, str) and group_id:
            group_of_run[run_id] = group_id
    groups: dict[str, _Group] = {}
    for event in events:
        run_id = event.get("runId")
        if not isinstance(run_id, str) or not run_id:  # outside any run: no turn to show it in
            continue
        group_id = group_of_run.get(run_id)
        key = group_id or run_id
        group = groups.setdefault(key, _Group(key=key, message_group_id=group_id))
        group.add(run_id, event)
    return groups


def _has_content(group: _Group) -> bool:
    """A group that only started and finished has nothing to draw (n8n makes no tree)."""
    return any(e.get("type") not in ("run-start", "run-finish") for e in group.events)


def _orphans(
    groups: dict[str, _Group],
    said_keys: set[str],
    said: Sequence[Said],
    newer_boundary: str | None,
) -> list[_Group]:
    """The groups none of the page's messages belong to (a background run, a run whose
    messages are on another page) that belong on this page, in time order: those with an
    event in the page's span (from its oldest message to the next newer page), as n8n's
    window of runs has it. An empty page is the whole thread when it is the newest."""
    since = _said_ms(said[0]) if said else None
    before = _iso_ms(newer_boundary) if newer_boundary else None
    if not said and newer_boundary:
        return []

    def in_page(group: _Group) -> bool:
        times = [_event_ms(e) for e in group.events]
        return any(
            ts is None or ((since is None or ts >= since) and (before is None or ts < before))
            for ts in times
        )

    found = [g for k, g in groups.items() if k not in said_keys and in_page(g)]
    # n8n sorts its trees by anchor (a missing time counting as the epoch); sorted is stable.
    return sorted(found, key=lambda g: g.anchor_ms or 0)


# -- messages -------------------------------------------------------------------------------


def _interleave(
    said: Sequence[Said],
    keys: list[str],
    snapshots: dict[str, _Snapshot],
    live: set[str],
    orphans: list[_Snapshot],
) -> list[Json]:
    """The page's messages in order, each group's tree on its assistant message; a group's
    tree with no text answer right after the group's last message; orphan trees where their
    time puts them (before the first message later than them, else at the end)."""
    last_of_group = {key: i for i, key in enumerate(keys)}
    answered = {key for s, key in zip(said, keys, strict=True) if s.role == "assistant"}
    waiting = deque(orphans)
    messages: list[Json] = []
    for i, (message, key) in enumerate(zip(said, keys, strict=True)):
        when = _said_ms(message)
        while waiting and _before(waiting[0].group.anchor_ms, when):
            messages.append(_tree_message(waiting.popleft()))
        if message.role == "user":
            messages.append(_user_message(message))
        elif message.role == "assistant":
            live_group = message.message_group_id if key in live else None
            messages.append(_assistant_message(message, snapshots.get(key), live_group))
        if last_of_group[key] == i and key not in answered and key in snapshots:
            messages.append(_tree_message(snapshots[key]))
    messages.extend(_tree_message(s) for s in waiting)
    return messages


def _before(anchor_ms: int | None, message_ms: int | None) -> bool:
    return anchor_ms is not None and message_ms is not None and anchor_ms < message_ms


def _user_message(said: Said) -> Json:
    message: Json = {
        "id": said.id,
        "role": "user",
        "createdAt": _js_created_at(said.created_at),
        "content": said.text,
        "reasoning": "",
        "isStreaming": False,
    }
    attachments = [a for a in said.attachments if a.get("type") in _RESOURCE_ATTACHMENTS]
    if attachments:
        message["attachments"] = attachments
    return message


def _assistant_message(said: Said, snapshot: _Snapshot | None, live_group: str | None) -> Json:
    """A text answer, with its group's tree when the tree shows anything. Its reasoning is
    the tree's (n8n takes the stored message's reasoning parts; ours are in the tree only)."""
    if snapshot is None:
        message: Json = {"id": said.id, "runId": said.run_id}
        # Not n8n's: a live group's answer names its group, so the run-sync frame that brings
        # the live tree lands on this message instead of adding a second one for the turn.
        if live_group:
            message["messageGroupId"] = live_group
        return message | _assistant_body(said.created_at, said.text, "")
    group, tree = snapshot.group, snapshot.tree
    message = {"id": said.id, "runId": group.run_ids[-1]}
    if group.message_group_id:
        message["messageGroupId"] = group.message_group_id
    message["runIds"] = list(group.run_ids)
    message |= _assistant_body(said.created_at, said.text, tree["reasoning"])
    if tree_has_content(tree):
        message["agentTree"] = tree
    return message


def _tree_message(snapshot: _Snapshot) -> Json:
    """A group's tree with no text answer to ride on: a message of its own, named by the group,
    its text the tree's."""
    group, tree = snapshot.group, snapshot.tree
    message: Json = {"id": group.message_group_id or group.run_ids[-1], "runId": group.run_ids[-1]}
    if group.message_group_id:
        message["messageGroupId"] = group.message_group_id
    message["runIds"] = list(group.run_ids)
    written = group.last_ms if group.last_ms is not None else (group.anchor_ms or 0)
    message |= _assistant_body(js_iso(written), tree["textContent"], tree["reasoning"])
    message["agentTree"] = tree
    return message


def _assistant_body(created_at: str, content: str, reasoning: str) -> Json:
    return {
        "role": "assistant",
        "createdAt": _js_created_at(created_at),
        "content": content,
        "reasoning": reasoning,
        "isStreaming": False,
    }


def _propagate_group_ids(messages: list[Json]) -> None:
    """Within a turn (the messages after a person's message), an answer that names no group
    joins the turn's last named one, so the collapse below takes it in (n8n does the same)."""
    start = 0
    for end in [*(i for i, m in enumerate(messages) if m["role"] == "user"), len(messages)]:
        turn = messages[start:end]
        named = [m["messageGroupId"] for m in turn if m.get("messageGroupId")]
        for message in turn:
            if named and message["role"] == "assistant" and not message.get("messageGroupId"):
                message["messageGroupId"] = named[-1]
        start = end + 1


def _collapse_groups(messages: list[Json]) -> list[Json]:
    """One message per group: the last. It takes the tree of an earlier one when it has no
    tree worth drawing itself."""
    kept: dict[str, Json] = {}
    dropped: set[int] = set()
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        group_id = message.get("messageGroupId")
        if not group_id:
            continue
        last = kept.setdefault(group_id, message)
        if last is message:
            continue
        if not _draws(last) and _draws(message):
            last["agentTree"] = message["agentTree"]
            if "runIds" in message:
                last["runIds"] = message["runIds"]
            else:
                last.pop("runIds", None)
        dropped.add(i)
    return [m for i, m in enumerate(messages) if i not in dropped]


def _draws(message: Json) -> bool:
    tree = message.get("agentTree")
    return isinstance(tree, dict) and tree_has_content(tree)


# -- time -----------------------------------------------------------------------------------


def _iso_ms(text: str) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 time (UTC when it names no zone)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MS


def _said_ms(said: Said) -> int | None:
    return _iso_ms(said.created_at)


def _js_created_at(text: str) -> str:
    """A time as n8n writes one (`Date.toISOString()`); text that is no time passes as is."""
    ms = _iso_ms(text)
    return text if ms is None else js_iso(ms)
