"""Projects, as the caller's metadata describes them (the n8n backend owns membership)."""

from __future__ import annotations

from pydantic import Field

from server.tools.spec import ToolContext, ToolModel, ToolSpec

GROUP = "projects"


class NoInput(ToolModel):
    pass


class Project(ToolModel):
    id: str
    is_default: bool = Field(alias="isDefault", description="Where new things are created")


class ProjectsOutput(ToolModel):
    projects: list[Project]


async def list_projects(ctx: ToolContext, _args: NoInput) -> ProjectsOutput:
    caller = ctx.caller
    return ProjectsOutput(
        projects=[
            Project(id=p, is_default=p == caller.project_id) for p in sorted(caller.project_ids)
        ]
    )


TOOLS = [
    ToolSpec(
        name="list-projects",
        description="The projects the user can see; new workflows and tables go into the "
        "default one unless a projectId is given.",
        group=GROUP,
        input_model=NoInput,
        output_model=ProjectsOutput,
        handler=list_projects,
    ),
]
