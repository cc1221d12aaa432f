"""`build-agent` and `agents` work on n8n's Agent artifacts, which live in n8n's agents
module; this service does not host it. They are declared so the tool list shows them, not
registered (the condition never holds here), and a direct call says why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from server.errors import FailedPreconditionError
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["TOOLS", "AgentsModuleTools"]

REQUIRES = "n8n's agents backend module (runs inside n8n; not available to this service)"


@dataclass(frozen=True, kw_only=True)
class AgentsModuleTools:
    """Nothing: these tools only say where n8n's agents live."""


class WorkflowRef(ToolModel):
    id: str
    name: str
    description: str | None = None


class BuildAgentInput(ToolModel):
    message: str = Field(min_length=1, description="Everything the agent builder needs")
    name: str | None = None
    agent_id: str | None = Field(None, alias="agentId")
    workflow_context: list[WorkflowRef] | None = Field(None, alias="workflowContext")


class AgentsInput(ToolModel):
    action: Literal["list"] = "list"


class Untouched(ToolModel):
    ok: bool
    error: str | None = None
    result: dict[str, Any] | None = None


async def _not_here(_ctx: ToolContext[AgentsModuleTools], _args: Any) -> Untouched:
    raise FailedPreconditionError(f"this tool needs {REQUIRES}")


def _never(_services: AgentsModuleTools) -> bool:
    return False


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="build-agent",
        description="Build or edit an n8n Agent through the agents-module builder.",
        group="orchestration",
        services=AgentsModuleTools,
        input_model=BuildAgentInput,
        output_model=Untouched,
        handler=_not_here,
        condition=_never,
        requires=REQUIRES,
    ),
    ToolSpec(
        name="agents",
        description="List the project's n8n Agents.",
        group="agents",
        services=AgentsModuleTools,
        input_model=AgentsInput,
        output_model=Untouched,
        handler=_not_here,
        condition=_never,
        requires=REQUIRES,
    ),
]
