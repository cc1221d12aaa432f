"""Projects and licensed features of the embedded store: both come from outside it (the
caller's metadata, the service's settings), since it keeps no users or licence of its own."""

from __future__ import annotations

from collections.abc import Iterable

from server.core.caller import Caller

__all__ = ["CallerProjects", "ConfiguredFeatures"]


class CallerProjects:
    """The projects the n8n backend says the caller belongs to (see server/api/caller.py)."""

    async def visible(self, caller: Caller) -> list[str]:
        return sorted(caller.project_ids)


class ConfiguredFeatures:
    """The features named in INSTANCE_AI_LICENSED_FEATURES."""

    def __init__(self, features: Iterable[str]) -> None:
        self._features = frozenset(features)

    def enabled(self, feature: str) -> bool:
        return feature in self._features
