"""Credentials kept in n8n: the secret goes to n8n and is not kept here; n8n never returns
it, so the service tests a credential with n8n's own test."""

from __future__ import annotations

import re
from typing import Any

from server.core.caller import INSTANCE_SCOPED
from server.errors import InvalidArgumentError, NotFoundError
from server.instance.types import CredentialField, CredentialInfo, CredentialTypeSchema
from server.n8n.client import N8nClient
from server.n8n.workflows import parse_time

__all__ = ["N8nCredentials"]

# What n8n names a credential type with (camelCase identifiers); anything else is not one,
# and never becomes part of a request path.
_TYPE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


class N8nCredentials:
    def __init__(self, client: N8nClient) -> None:
        self.client = client

    async def create(
        self, *, project_id: str, name: str, type_name: str, data: dict[str, Any]
    ) -> CredentialInfo:
        created = await self.client.post(
            "/credentials", {"name": name, "type": type_name, "data": data}
        )
        return _info(created)

    async def update(
        self, credential_id: str, *, data: dict[str, Any], name: str | None = None
    ) -> CredentialInfo:
        await self.get(credential_id)
        body: dict[str, Any] = {"data": data}
        if name is not None:
            body["name"] = name
        return _info(await self.client.patch(f"/credentials/{credential_id}", body))

    async def all(
        self, project_ids: list[str], type_name: str | None = None
    ) -> list[CredentialInfo]:
        found = [_info(c) for c in await self.client.pages("/credentials")]
        return sorted(
            (c for c in found if type_name is None or c.type == type_name),
            key=lambda c: (c.name, c.id),
        )

    async def get(self, credential_id: str) -> CredentialInfo:
        try:
            return _info(await self.client.get(f"/credentials/{credential_id}"))
        except NotFoundError:
            raise NotFoundError(
                f"there is no credential {credential_id!r}; list-credentials names them"
            ) from None

    async def delete(self, credential_id: str) -> None:
        await self.get(credential_id)
        await self.client.delete(f"/credentials/{credential_id}")

    async def test(self, credential_id: str) -> tuple[bool, str]:
        """n8n's own test of the credential: (success, what n8n said)."""
        await self.get(credential_id)
        outcome = await self.client.post(f"/credentials/{credential_id}/test")
        success = str((outcome or {}).get("status", "")).lower() == "ok"
        return success, str((outcome or {}).get("message") or ("works" if success else "failed"))

    async def schema(self, type_name: str) -> CredentialTypeSchema | None:
        """The type's fields from n8n's credential schema (its own nodes, community and
        custom ones included)."""
        if not _TYPE_NAME.fullmatch(type_name):
            return None
        try:
            # An unknown name (a search's word) is an answer, not news: not logged.
            found = await self.client.request(
                "GET", f"/credentials/schema/{type_name}", expected=(400, 404)
            )
        except (NotFoundError, InvalidArgumentError):
            return None
        if not isinstance(found, dict):
            return None
        required = set(found.get("required") or [])
        properties = found.get("properties") or {}
        return CredentialTypeSchema(
            name=type_name,
            fields=[
                CredentialField(
                    name=name,
                    type=str(spec.get("type", "string")) if isinstance(spec, dict) else "string",
                    required=name in required,
                )
                for name, spec in properties.items()
            ],
        )


def _info(found: dict[str, Any]) -> CredentialInfo:
    return CredentialInfo(
        id=str(found["id"]),
        name=str(found["name"]),
        type=str(found["type"]),
        project_id=INSTANCE_SCOPED,
        created_at=parse_time(found.get("createdAt")),
        updated_at=parse_time(found.get("updatedAt")),
    )
