"""Who is calling: the user, the project new things go into, and the projects they may see.

The n8n backend knows users and project membership; it sends them with each call (see
`server/api/caller.py`), and everything project-scoped is filtered by them. An object in a
project the caller cannot see answers exactly as if it did not exist."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_PROJECT", "INSTANCE_SCOPED", "LOCAL", "LOCAL_USER", "Caller", "acting"]

DEFAULT_PROJECT = "personal"
LOCAL_USER = "local"
# The project of an object whose visibility the instance itself decided (n8n answers a call
# only with what the call's API key may read): every caller that got it may see it.
INSTANCE_SCOPED = "instance"


@dataclass(frozen=True, kw_only=True)
class Caller:
    user_id: str = LOCAL_USER
    project_id: str = DEFAULT_PROJECT
    project_ids: frozenset[str] = field(default_factory=lambda: frozenset({DEFAULT_PROJECT}))

    def sees(self, project_id: str | None) -> bool:
        """Objects saved before projects existed belong to the default project."""
        return project_id == INSTANCE_SCOPED or self.project_of(project_id) in self.project_ids

    @staticmethod
    def project_of(project_id: str | None) -> str:
        return project_id or DEFAULT_PROJECT

    def as_json(self) -> dict[str, Any]:
        return {
            "userId": self.user_id,
            "projectId": self.project_id,
            "projectIds": sorted(self.project_ids),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any] | None) -> Caller:
        if not value:
            return LOCAL
        return cls(
            user_id=value["userId"],
            project_id=value["projectId"],
            project_ids=frozenset(value["projectIds"]),
        )


LOCAL = Caller()

# Whom the work in progress is for: each front sets it for the call it serves (the runs and
# tasks a call starts inherit it), and the instance's activity log reads it to say who made a
# change. None: nobody's (the service's own work, e.g. recovery at start-up).
acting: ContextVar[Caller | None] = ContextVar("acting_caller", default=None)
