"""The Credentials service: where secret data enters. Answers carry metadata only."""

from __future__ import annotations

import grpc

from instance_ai.v1 import credentials_pb2, credentials_pb2_grpc
from server.api.caller import caller_of
from server.api.convert import request_object
from server.errors import NotFoundError
from server.instance import Credentials
from server.instance.types import CredentialInfo
from server.pipeline.credential_types import CredentialTypeIndex

__all__ = ["CredentialsServicer"]


class CredentialsServicer(credentials_pb2_grpc.CredentialsServicer):
    def __init__(self, credentials: Credentials, types: CredentialTypeIndex) -> None:
        self._credentials = credentials
        self._types = types

    async def CreateCredential(
        self, request: credentials_pb2.CreateCredentialRequest, context: grpc.aio.ServicerContext
    ) -> credentials_pb2.CreateCredentialResponse:
        caller = caller_of(context)
        project = request.project_id or caller.project_id
        if not caller.sees(project):
            raise NotFoundError(f"project {project!r} does not exist")
        await self._types.check(request.type)
        created = await self._credentials.create(
            project_id=project,
            name=request.name,
            type_name=request.type,
            data=request_object(request.data_json, "data_json"),
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
            request.credential_id,
            data=request_object(request.data_json, "data_json"),
            name=request.name or None,
        )
        return credentials_pb2.UpdateCredentialResponse(credential=_info(updated))


def _info(info: CredentialInfo) -> credentials_pb2.CredentialInfo:
    return credentials_pb2.CredentialInfo(
        id=info.id,
        name=info.name,
        type=info.type,
        project_id=info.project_id,
        created_at=info.created_at.isoformat(),
        updated_at=info.updated_at.isoformat(),
    )
