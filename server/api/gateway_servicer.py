"""The Gateway service: a filesystem-gateway key for the calling user, and the state of
that user's gateway. Only ever the caller's own: a user cannot reach another's gateway."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc

from instance_ai.v1 import gateway_pb2, gateway_pb2_grpc
from server.api.caller import caller_of
from server.errors import FailedPreconditionError
from server.mcp.gateway import Gateways
from server.mcp.gateway_keys import GatewayKeys

__all__ = ["GatewayServicer"]


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, keys: GatewayKeys, gateways: Gateways, http_url: str | None) -> None:
        self._keys = keys
        self._gateways = gateways
        self._http_url = http_url

    async def CreateGatewayKey(
        self, request: gateway_pb2.CreateGatewayKeyRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateGatewayKeyResponse:
        if self._http_url is None:
            raise FailedPreconditionError(
                "gateways connect to the HTTP endpoint, which is off: set INSTANCE_AI_HTTP_PORT"
            )
        user_id = caller_of(context).user_id
        key = await self._keys.mint(user_id)
        # The last key is revoked: a gateway still connected with it goes too.
        self._gateways.disconnect(user_id, "its key was replaced")
        return gateway_pb2.CreateGatewayKeyResponse(
            key=key,
            server_url=self._http_url,
            command=f"INSTANCE_AI_GATEWAY_KEY={key} instance-ai gateway "
            f"--server {self._http_url} --root DIR",
        )

    async def GetGateway(
        self, request: gateway_pb2.GetGatewayRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetGatewayResponse:
        found = self._gateways.of(caller_of(context).user_id)
        if found is None:
            return gateway_pb2.GetGatewayResponse(connected=False)
        response = gateway_pb2.GetGatewayResponse(
            connected=True,
            root_path=found["rootPath"],
            host_identifier=found.get("hostIdentifier", ""),
            tools=found["tools"],
            write_access=any(c.get("writeAccess") for c in found.get("toolCategories", [])),
        )
        response.connected_at.FromDatetime(datetime.fromtimestamp(found["connectedAt"], UTC))
        return response
