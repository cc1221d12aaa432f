"""The instance's activity log as a tool (n8n's `activity`): what was recently created,
changed, published or deleted in the conversation's project, and by whom; an entry opened
with everything else the log knows of its resource. Registered where the instance keeps a
log the service can read (the embedded one)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from server.instance import Activity
from server.instance.types import ActivityEntry
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "ActivityTools"]

GROUP = "activity"
DEFAULT_LIMIT = 30
MAX_LIMIT = 100
# How much of a resource's history an expanded entry brings.
HISTORY = 20


@dataclass(frozen=True, kw_only=True)
class ActivityTools:
    """The instance's log (None: it keeps none the service can read; the tool is absent)."""

    activity: Activity | None


class ListAction(ToolModel):
    """Read the log: further back than a list already seen, or filtered."""

    action: Literal["list"] = Field(
        description="Read the log: further back than a list already seen, or filtered"
    )
    category: Literal["workflow", "credential"] | None = Field(
        None, description="Only one kind of entry"
    )
    resource_id: str | None = Field(
        None, alias="resourceId", min_length=1, description="Only one resource, e.g. a workflow id"
    )
    before_id: int | None = Field(
        None, alias="beforeId", description="Page back: only entries older than this id"
    )
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="How many entries")


class ExpandAction(ToolModel):
    """Open one entry, with everything else the log knows of its resource."""

    action: Literal["expand"] = Field(description="Open one entry by its id")
    id: int = Field(description="The entry's id, from a list")


ActivityInput = Annotated[ListAction | ExpandAction, Field(discriminator="action")]


class ActivityEntryModel(ToolModel):
    id: int
    at: datetime
    category: str
    action: str
    resource_type: str | None = Field(None, alias="resourceType")
    resource_id: str | None = Field(None, alias="resourceId")
    resource_name: str | None = Field(None, alias="resourceName")
    by_current_user: bool = Field(alias="byCurrentUser")
    detail: dict[str, Any] | None = None


class ActivityOutput(ToolModel):
    entries: list[ActivityEntryModel] | None = None
    entry: ActivityEntryModel | None = None
    resource_history: list[ActivityEntryModel] | None = Field(None, alias="resourceHistory")
    live_record_hint: str | None = Field(
        None, alias="liveRecordHint", description="The tool that reads the resource as it is now"
    )
    not_found: bool | None = Field(None, alias="notFound")


def _model(entry: ActivityEntry, user_id: str) -> ActivityEntryModel:
    return ActivityEntryModel(
        id=entry.id,
        at=entry.at,
        category=entry.category,
        action=entry.action,
        resource_type=entry.resource_type,
        resource_id=entry.resource_id,
        resource_name=entry.resource_name,
        by_current_user=entry.user_id == user_id,
        detail=entry.detail,
    )


def _live_record_hint(entry: ActivityEntry) -> str | None:
    """The log is history: the resource as it is now is read with its own tool."""
    if entry.resource_type == "workflow" and entry.resource_id:
        return f'get-workflow(workflowId="{entry.resource_id}")'
    if entry.resource_type == "credential":
        return "list-credentials()"
    return None


async def instance_activity(
    ctx: ToolContext[ActivityTools], args: ListAction | ExpandAction
) -> ActivityOutput:
    log = ctx.services.activity
    assert log is not None  # registered only with a log
    # The conversation's project, as n8n's conversation surface reads it.
    projects = [ctx.caller.project_id]
    user = ctx.caller.user_id
    if isinstance(args, ExpandAction):
        found = await log.expand(args.id, project_ids=projects, history=HISTORY)
        if found is None:
            return ActivityOutput(not_found=True)
        return ActivityOutput(
            entry=_model(found.entry, user),
            resource_history=[_model(e, user) for e in found.resource_history],
            live_record_hint=_live_record_hint(found.entry),
        )
    entries = await log.feed(
        project_ids=projects,
        limit=args.limit,
        category=args.category,
        resource_id=args.resource_id,
        before_id=args.before_id,
    )
    return ActivityOutput(entries=[_model(e, user) for e in entries])


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="instance-activity",
        description="Read the instance's activity log: what was recently created, changed, "
        "published, archived or deleted in this project, and whether the user did it. list "
        "pages back or filters to one kind of entry or one resource; expand opens one entry "
        "with everything else the log knows of the same resource (a workflow's recent "
        "history at a glance). Entries are history, not live records (read those with "
        "get-workflow or list-credentials), and may name something since deleted.",
        group=GROUP,
        services=ActivityTools,
        input_model=ActivityInput,
        output_model=ActivityOutput,
        handler=instance_activity,
        condition=lambda services: services.activity is not None,
        requires="an instance whose activity log the service reads (the embedded one; "
        "n8n keeps its own out of its public API)",
    ),
]
