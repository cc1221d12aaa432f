"""What a tool is: input and output models, a handler, and metadata. The registry (built with
the orchestrator) collects these, derives provider schemas from the input models and
validates calls against them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from server.runtime import Runtime


class ToolModel(BaseModel):
    """Base of tool inputs and outputs: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    runtime: Runtime
    thread_id: str


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    name: str
    description: str
    group: str
    input_model: type[ToolModel]
    output_model: type[ToolModel]
    handler: Callable[[ToolContext, Any], Awaitable[ToolModel]]
    # The HITL permission gating the tool, if any (e.g. "deleteWorkflow").
    hitl_action: str | None = None
