"""The Credentials service: where secret data enters. Answers carry metadata only."""

from __future__ import annotations

import grpc

from instance_ai.structs import from_struct
from instance_ai.v1 import credentials_pb2, credentials_pb2_grpc
from server.api.caller import caller_of
from server.catalog import CatalogService
from server.errors import InvalidArgumentError, NotFoundError, UnavailableError
from server.instance import Credentials
from server.instance.types import CredentialInfo

__all__ = ["CredentialsServicer"]


class CredentialsServicer(credentials_pb2_grpc.CredentialsServicer):
    def __init__(self, credentials: Credentials, catalog: CatalogService) -> None:
        self._credentials = credentials
        self._catalog = catalog

    async def CreateCredential(
        self, request: credentials_pb2.CreateCredentialRequest, context: grpc.aio.ServicerContext
    ) -> credentials_pb2.CreateCredentialResponse:
        caller = caller_of(context)
        project = request.project_id or caller.project_id
        if not caller.sees(project):
            raise NotFoundError(f"project {project!r} does not exist")
        await self._check_type(request.type)
        created = await self._credentials.create(
            project_id=project,
            name=request.name,
            type_name=request.type,
            data=from_struct(request.data),
        )
        return credentials_pb2.CreateCredentialResponse(credential=_info(created))

    async def UpdateCredential(
        self, request: credentials_pb2.UpdateCredentialRequest, context: grpc.aio.ServicerContext
    ) -> credentials_pb2.UpdateCredentialResponse:
        caller = caller_of(context)
        current = await self._credentials.get(request.credential_id)
        if not caller.sees(current.project_id):
            raise NotFoundError(f"there is no credential {request.credential_id!r}")
        updated = await self._credentials.update(
            request.credential_id, data=from_struct(request.data), name=request.name or None
        )
        return credentials_pb2.UpdateCredentialResponse(credential=_info(updated))

    async def _check_type(self, type_name: str) -> None:
        """Known to the node catalog, when there is one to ask."""
        try:
            catalog = await self._catalog.get()
        except UnavailableError:
            return
        if type_name not in catalog.credentials:
            near = [c.name for c in catalog.search_credentials(type_name, limit=3)]
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise InvalidArgumentError(f"type: unknown credential type {type_name!r}{hint}")


def _info(info: CredentialInfo) -> credentials_pb2.CredentialInfo:
    return credentials_pb2.CredentialInfo(
        id=info.id,
        name=info.name,
        type=info.type,
        project_id=info.project_id,
        created_at=info.created_at.isoformat(),
        updated_at=info.updated_at.isoformat(),
    )
