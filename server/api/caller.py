"""The caller of a request, from gRPC metadata (or the same HTTP headers):

x-instance-ai-user       the user id (default: local)
x-instance-ai-project    the project new things go into (default: personal)
x-instance-ai-projects   comma-separated projects the user may see (default: the project)
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import grpc

from instance_ai.metadata import PROJECT_KEY, PROJECTS_KEY, USER_KEY
from server.core.caller import DEFAULT_PROJECT, INSTANCE_SCOPED, LOCAL_USER, Caller
from server.errors import InvalidArgumentError

__all__ = ["PROJECTS_KEY", "PROJECT_KEY", "USER_KEY", "caller_from", "caller_of"]

_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")


def caller_of(context: grpc.aio.ServicerContext) -> Caller:
    metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    return caller_from(metadata)


def caller_from(metadata: Mapping[str, str]) -> Caller:
    """The caller named by gRPC metadata or HTTP headers (lower-case keys)."""
    user = _checked(metadata.get(USER_KEY, LOCAL_USER), USER_KEY)
    project = _checked(metadata.get(PROJECT_KEY, DEFAULT_PROJECT), PROJECT_KEY)
    listed = metadata.get(PROJECTS_KEY)
    projects = (
        {_checked(p.strip(), PROJECTS_KEY) for p in listed.split(",") if p.strip()}
        if listed
        else {project}
    )
    if INSTANCE_SCOPED in projects:
        raise InvalidArgumentError(
            f"project {INSTANCE_SCOPED!r} is reserved (objects an n8n instance scoped by the "
            "call's key); send the user's own project ids"
        )
    if project not in projects:
        raise InvalidArgumentError(
            f"{PROJECT_KEY} {project!r} is not among {PROJECTS_KEY}; send a project the user "
            "belongs to"
        )
    return Caller(user_id=user, project_id=project, project_ids=frozenset(projects))


def _checked(value: str, key: str) -> str:
    if not _ID.fullmatch(value):
        raise InvalidArgumentError(
            f"metadata {key}: {value[:40]!r} is not an id (1-128 of A-Z a-z 0-9 . _ : @ -)"
        )
    return value
