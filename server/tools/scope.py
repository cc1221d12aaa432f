"""What the caller may see: project-scoped lookups shared by the tools. Another project's
object answers exactly like a missing one."""

from __future__ import annotations

from typing import Any

from server.core.caller import Caller
from server.errors import FailedPreconditionError, NotFoundError
from server.instance import Credentials, CredentialSecrets, Executions, Workflows
from server.instance.types import CredentialInfo, Execution, Workflow

__all__ = [
    "check_project",
    "revealed",
    "visible_credential",
    "visible_execution",
    "visible_workflow",
]


async def visible_workflow(workflows: Workflows, caller: Caller, workflow_id: str) -> Workflow:
    return await workflows.require(workflow_id, caller)


async def visible_execution(
    executions: Executions, workflows: Workflows, caller: Caller, execution_id: str
) -> Execution:
    execution = await executions.require(execution_id)
    workflow = await workflows.get(execution.workflow_id)
    if workflow is not None and not caller.sees(workflow.project_id):
        raise NotFoundError(f"execution {execution_id!r} does not exist")
    return execution


async def visible_credential(
    credentials: Credentials, caller: Caller, credential_id: str
) -> CredentialInfo:
    info = await credentials.get(credential_id)
    if not caller.sees(info.project_id):
        raise NotFoundError(
            f"there is no credential {credential_id!r}; list-credentials names them"
        )
    return info


async def revealed(secrets: CredentialSecrets | None, info: CredentialInfo) -> dict[str, Any]:
    """A visible credential's secret data, for the service's own use (never a result)."""
    if secrets is None:
        raise FailedPreconditionError(
            "this instance keeps credential data to itself, so the service cannot use "
            f"credential {info.id!r} here"
        )
    return await secrets.reveal(info.id)


def check_project(caller: Caller, project_id: str | None) -> str:
    """The project to create in: the one asked for (if the caller is in it) or theirs."""
    if project_id is None:
        return caller.project_id
    if not caller.sees(project_id):
        raise NotFoundError(f"project {project_id!r} does not exist; list-projects names them")
    return project_id
