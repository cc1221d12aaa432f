"""What a tool is: input and output models, a handler, and metadata. The registry collects
these, derives provider schemas from the input models and validates calls against them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from sandbox.protocol import Sandboxes
from server.core.caller import LOCAL, Caller

__all__ = [
    "DIRECT_RUN",
    "PLANNED_TASK_ALLOWS",
    "PLANNED_TASK_RUN",
    "Orchestration",
    "SandboxFor",
    "Suspend",
    "ToolContext",
    "ToolModel",
    "ToolSource",
    "ToolSpec",
    "blocked_message",
]

# The services a tool group may use: one small dataclass per group (e.g.
# `server.tools.data_tables.DataTableTools`), handed to its handlers as `ctx.services`.
S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)

# The run kind of a call from a front with no agent behind it (see calls.DirectPolicy).
DIRECT_RUN = "direct"
# The kind of the runs that execute an approved plan's tasks, and the actions they take
# without asking again (the approved plan was the consent; blocked stays blocked).
PLANNED_TASK_RUN = "planned-task"
PLANNED_TASK_ALLOWS = frozenset(
    {
        "createWorkflow",
        "updateWorkflow",
        "runWorkflow",
        "publishWorkflow",
        "createDataTable",
        "mutateDataTableSchema",
        "mutateDataTableRows",
    }
)

# The thread's sandbox, made on first use.
SandboxFor = Callable[[str], Awaitable[Sandboxes]]


class ToolModel(BaseModel):
    """Base of tool inputs and outputs: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


class Suspend(Exception):
    """Raised by a handler that needs a person's answer. The agent persists the run, publishes
    `confirmation-request` with `question` merged into the payload (`inputType`, `message`,
    `severity`, `questions`, `tasks` ...) and calls the handler again with the answer in
    `ToolContext.resume`; a direct call is refused instead (see `server/tools/calls.py`)."""

    def __init__(self, question: dict[str, Any]) -> None:
        super().__init__(question.get("message", "waiting for an answer"))
        self.question = question


class Orchestration(Protocol):
    """What orchestration tools reach of the agent layer (implemented in `server/agent`)."""

    async def schedule_plan(self, thread_id: str, run_id: str | None, caller: Caller) -> int:
        """Start the approved plan's ready tasks; returns how many started."""
        ...

    async def delegate(
        self,
        thread_id: str,
        run_id: str | None,
        *,
        role: str,
        briefing: str,
        key: str | None,
        caller: Caller,
        kind: str | None = None,
        workflow_id: str | None = None,
    ) -> dict[str, Any]:
        """Start a background agent; returns `{status, taskId?, agentId?}`."""
        ...


@dataclass(frozen=True, kw_only=True)
class ToolContext(Generic[S_co]):
    """One call: who makes it, where, and the services of the tool's group (nothing else)."""

    services: S_co
    thread_id: str
    run_id: str | None = None
    agent_id: str | None = None
    tool_call_id: str | None = None
    # The user message this run answers; a denied plan may not be resubmitted within it.
    message_group_id: str | None = None
    # chat | follow-up | replan | background: what started the run.
    run_kind: str = DIRECT_RUN
    # The person's answer, when a suspended call is resumed (see hitl.parse_resume).
    resume: dict[str, Any] | None = None
    orchestration: Orchestration | None = None
    # Who asked: project-scoped objects are filtered by it (see tools/scope.py).
    caller: Caller = LOCAL


@dataclass(frozen=True, kw_only=True)
class ToolSpec(Generic[S]):
    name: str
    description: str
    group: str
    # The group's services class; its one instance (bound in the registry) is handed to the
    # handler.
    services: type[S]
    # A ToolModel subclass, or an annotated union of them (a tool with modes).
    input_model: Any
    output_model: type[ToolModel]
    handler: Callable[[ToolContext[S], Any], Awaitable[ToolModel]]
    # The HITL permission gating the tool, if any (e.g. "runWorkflow").
    hitl_action: str | None = None
    # The resource an "always in this thread" answer covers, from the parsed arguments, when
    # the arguments' own ids do not say it (see calls.grant_key).
    grant: Callable[[Any], str] | None = None
    severity: str = "warning"
    # The tool itself asks the person something on its first call (raises Suspend): only the
    # agent can run it.
    asks_user: bool = False
    # The tool may ask (e.g. only for a host not approved yet); direct calls run it and are
    # refused only if it does ask.
    may_ask: bool = False
    # The tool applies its HITL action itself (e.g. per host), not the generic approval.
    self_gated: bool = False
    # Registered only where this holds (e.g. a search provider is configured); `requires`
    # says what it needs, for people reading the tool list.
    condition: Callable[[S], bool] | None = None
    requires: str = ""
    # Offered to the model only in a run whose message carries a parseable attachment
    # (registered, and callable directly, like any other).
    only_with_attachments: bool = False
    # A tool described by JSON Schema rather than a model (an MCP server's tool): calls are
    # validated against `json_schema` as is, the model is shown `provider_schema` (sanitised),
    # and the handler receives the arguments as a dict.
    json_schema: dict[str, Any] | None = None
    provider_schema: dict[str, Any] | None = None


def blocked_message(spec: ToolSpec[Any]) -> str:
    return (
        f"{spec.name} is blocked on this server ({spec.hitl_action}: blocked in "
        "INSTANCE_AI_PERMISSIONS); do not retry it"
    )


class ToolSource(Protocol):
    """Tools that come and go while the service runs (MCP servers, filesystem gateways):
    the registry asks for the current ones on every listing and lookup."""

    def specs(self, user_id: str | None) -> list[ToolSpec[Any]]:
        """The tools offered now: those of every user, plus `user_id`'s own when given."""
        ...
