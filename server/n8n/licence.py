"""What the n8n instance's licence allows, found out while the service runs (a licence can
change under a running service): the probe refreshes it each time n8n answers.

n8n serves every workflow's history whatever the licence (names and notes of versions are
kept by the service), so the version tools are always on. Folders need `feat:folders`: asking
for a folder listing tells, since n8n checks the licence before anything else about the
request."""

from __future__ import annotations

import structlog

from server.errors import NotFoundError, PermissionDeniedError
from server.instance import FOLDERS_FEATURE, InstanceUnavailableError
from server.n8n.client import N8nClient
from server.settings import LICENSED_FEATURES

__all__ = ["N8nFeatures"]

log = structlog.get_logger(__name__)


class N8nFeatures:
    def __init__(self, client: N8nClient) -> None:
        self.client = client
        self._always = frozenset(LICENSED_FEATURES)
        self._folders = False

    def enabled(self, feature: str) -> bool:
        return feature in self._always or (feature == FOLDERS_FEATURE and self._folders)

    async def refresh(self) -> None:
        """Ask n8n again (with the service's key: a user's key may still lack the scope, which
        its own calls then say)."""
        try:
            # "personal" names no project in a listing: past the licence check, n8n says so.
            await self.client.request(
                "GET", "/projects/personal/folders", params={"take": 1}, expected=(403, 404)
            )
            folders = True
        except NotFoundError:
            folders = True
        except PermissionDeniedError:
            folders = False
        except InstanceUnavailableError:
            return  # keep what was last known
        if folders != self._folders:
            log.info("n8n licence", folders=folders)
            self._folders = folders
