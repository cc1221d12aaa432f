"""What a run is made of between model turns: the step in progress (persisted on the run
row), who runs it, a tool call waiting for a person, and a run the service starts itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from server.core.caller import LOCAL, Caller

__all__ = ["FollowUp", "Outcome", "RunScope", "RunState", "Suspension"]


@dataclass(kw_only=True)
class RunState:
    """The tool calls of the step in progress; persisted on the run row."""

    steps: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The call waiting for a person: {toolCallId, requestId, gate: approval|tool}.
    suspended: dict[str, Any] | None = None

    @classmethod
    def load(cls, value: dict[str, Any] | None) -> RunState:
        return cls(**value) if value else cls()

    def dump(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "pending": self.pending,
            "results": self.results,
            "suspended": self.suspended,
        }

    def open_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.pending if c["id"] not in self.results]


@dataclass(frozen=True, kw_only=True)
class RunScope:
    """Who is running: the thread's orchestrator run, or a background agent."""

    thread_id: str
    run_id: str | None
    agent_id: str
    kind: str
    message_group_id: str | None = None
    caller: Caller = LOCAL
    # The message that started the run carries a file parse-file reads (the tool is offered).
    attachments: bool = False

    @property
    def background(self) -> bool:
        return self.kind == "background"


@dataclass(frozen=True, kw_only=True)
class Suspension:
    question: dict[str, Any]
    gate: str  # approval (the loop asks) | tool (the tool asks)


Outcome = dict[str, Any] | Suspension  # a tool_result block's {content, is_error}, or a wait


@dataclass(frozen=True, kw_only=True)
class FollowUp:
    """A run the service starts itself (replan, synthesize, a planned task the orchestrator
    executes), for the plan's caller."""

    text: str
    kind: str
    caller: Caller
    # The planned task this run executes: its outcome settles the task.
    task_id: str | None = None
