"""The node and credential type catalog (see catalog.py), loaded once on first use."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from server.catalog.catalog import Catalog, CredentialType, Finding, NodeType
from server.errors import UnavailableError

__all__ = ["Catalog", "CatalogService", "CredentialType", "Finding", "NodeType"]


class CatalogService:
    """Hands out the catalog, parsing it on first use (~10 MB of JSON). `locate` returns the
    catalog directory, or raises UnavailableError saying why there is none."""

    def __init__(self, locate: Callable[[], Path]) -> None:
        self._locate = locate
        self._catalog: Catalog | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> Catalog:
        if self._catalog is None:
            async with self._lock:
                if self._catalog is None:
                    directory = self._locate()
                    try:
                        self._catalog = await asyncio.to_thread(Catalog.load, directory)
                    except (OSError, ValueError, KeyError) as exc:
                        raise UnavailableError(
                            f"the node catalog in {directory} is unreadable: {exc}"
                        ) from exc
        return self._catalog
