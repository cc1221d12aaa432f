"""Credential types as a caller may name them: the node catalog's first, then the ones only
the instance knows (an n8n instance's community or custom nodes), asked of it by exact name
(n8n describes one type at a time and lists none)."""

from __future__ import annotations

from dataclasses import dataclass

from server.catalog import CatalogService
from server.errors import InvalidArgumentError, UnavailableError
from server.instance import CredentialTypes
from server.instance.types import CredentialTypeSchema

__all__ = ["CredentialTypeIndex", "CredentialTypeMatch"]


@dataclass(frozen=True, kw_only=True)
class CredentialTypeMatch:
    name: str
    display_name: str
    description: str


class CredentialTypeIndex:
    def __init__(self, catalog: CatalogService, instance_types: CredentialTypes | None) -> None:
        self.catalog = catalog
        self.instance_types = instance_types

    async def check(self, type_name: str) -> None:
        """Raises INVALID_ARGUMENT, with the nearest names, for a type neither knows. Without
        a catalog to ask (the sandbox image is not ready) nor an instance, the name passes:
        the store refuses what it cannot keep."""
        try:
            catalog = await self.catalog.get()
        except UnavailableError:
            return
        if type_name in catalog.credentials or await self._instance_schema(type_name):
            return
        near = [c.name for c in catalog.search_credentials(type_name, limit=3)]
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise InvalidArgumentError(f"type: unknown credential type {type_name!r}{hint}")

    async def search(self, query: str) -> list[CredentialTypeMatch]:
        catalog = await self.catalog.get()
        found = [
            CredentialTypeMatch(
                name=c.name,
                display_name=c.display_name,
                description=f"{c.display_name} credential"
                + (f", used by {', '.join(c.supported_nodes[:5])}" if c.supported_nodes else ""),
            )
            for c in catalog.search_credentials(query)
        ]
        name = query.strip()
        if name not in catalog.credentials:
            schema = await self._instance_schema(name)
            if schema is not None:
                found.insert(0, _instance_match(schema))
        return found

    async def _instance_schema(self, type_name: str) -> CredentialTypeSchema | None:
        if self.instance_types is None:
            return None
        return await self.instance_types.schema(type_name)


def _instance_match(schema: CredentialTypeSchema) -> CredentialTypeMatch:
    fields = ", ".join(f.name + (" (required)" if f.required else "") for f in schema.fields)
    return CredentialTypeMatch(
        name=schema.name,
        display_name=schema.name,
        description="a credential type of the n8n instance (not in the node catalog); "
        f"fields: {fields or 'none'}",
    )
