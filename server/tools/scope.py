"""What the caller may see: project-scoped lookups shared by the tools. Another project's
object answers exactly like a missing one."""

from __future__ import annotations

from server.domain.credentials import CredentialInfo
from server.domain.executions import Execution
from server.domain.workflows import Workflow
from server.errors import NotFoundError
from server.tools.spec import ToolContext


async def visible_workflow(ctx: ToolContext, workflow_id: str) -> Workflow:
    return await ctx.runtime.workflows.require(workflow_id, ctx.caller)


async def visible_execution(ctx: ToolContext, execution_id: str) -> Execution:
    execution = await ctx.runtime.executions.require(execution_id)
    workflow = await ctx.runtime.workflows.get(execution.workflow_id)
    if workflow is not None and not ctx.caller.sees(workflow.project_id):
        raise NotFoundError(f"execution {execution_id!r} does not exist")
    return execution


async def visible_credential(ctx: ToolContext, credential_id: str) -> CredentialInfo:
    info = await ctx.runtime.credentials.get(credential_id)
    if not ctx.caller.sees(info.project_id):
        raise NotFoundError(
            f"there is no credential {credential_id!r}; list-credentials names them"
        )
    return info


def check_project(ctx: ToolContext, project_id: str | None) -> str:
    """The project to create in: the one asked for (if the caller is in it) or theirs."""
    if project_id is None:
        return ctx.caller.project_id
    if not ctx.caller.sees(project_id):
        raise NotFoundError(f"project {project_id!r} does not exist; list-projects names them")
    return project_id
