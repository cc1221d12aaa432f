"""Which tools each kind of agent is offered: the seed's tool distribution.

The orchestrator has the whole surface (the core from the first request, the rest loaded on
demand). A background agent gets only the domain tools wired into it: workflow tools (not the
sandbox-backed `build-workflow`), node discovery (not `materialize-node-type`, which writes
into the workspace), data tables, credential set-up (not reading or deleting credentials),
the knowledge base through `workspace_read_file` and `workspace_grep`, and `ask-user`.
Never orchestration, verification, executions, the workspace's writes and commands, web
research or the browser.
"""

from __future__ import annotations

from typing import Any

from server.tools.spec import ToolSpec

__all__ = ["BACKGROUND_GROUPS", "BACKGROUND_TOOLS", "EXCLUDED_FROM_BACKGROUND", "for_background"]

BACKGROUND_GROUPS = frozenset({"workflows", "nodes", "data-tables"})
# Single tools of other groups that background agents get.
BACKGROUND_TOOLS = frozenset(
    {
        "ask-user",
        "workspace_read_file",
        "workspace_grep",
        "search-credential-types",
        "list-credentials",
        "setup-credentials",
    }
)
# Tools of those groups that stay with the orchestrator (sandbox-backed: compiling a source,
# writing into the workspace).
EXCLUDED_FROM_BACKGROUND = frozenset(
    {"build-workflow", "validate-workflow", "materialize-node-type"}
)


def for_background(spec: ToolSpec[Any]) -> bool:
    """Whether a background agent is offered the tool."""
    if spec.name in EXCLUDED_FROM_BACKGROUND:
        return False
    return spec.group in BACKGROUND_GROUPS or spec.name in BACKGROUND_TOOLS
