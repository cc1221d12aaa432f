"""The service, as the bridge calls it: one gRPC channel, and each call made as the n8n user
whose session asked (their id, the project the call is for, the projects they may see, and
their own n8n API key where the operator configured one, so what the assistant builds lands
in n8n with that user's rights)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc

from instance_ai.metadata import ACTING_KEY_KEY, PROJECT_KEY, PROJECTS_KEY, USER_KEY
from instance_ai.v1 import agent_pb2_grpc, browser_pb2_grpc, gateway_pb2_grpc
from instance_ai_client.connection import ClientConfig
from n8n_bridge.answers import from_rpc
from n8n_bridge.n8n_user import N8nUser

__all__ = ["Metadata", "Service"]

Metadata = tuple[tuple[str, str], ...]


class Service:
    """`open` it in the event loop that serves (a gRPC channel belongs to the loop it was
    made in), `close` it there."""

    def __init__(self, config: ClientConfig, user_keys: Mapping[str, str]) -> None:
        self._config = config
        self._auth = config.metadata()
        # n8n user id or e-mail → that user's n8n API key.
        self._user_keys = dict(user_keys)
        self._channel: grpc.aio.Channel | None = None

    def open(self) -> None:
        self._channel = self._config.channel()
        self.agent = agent_pb2_grpc.AgentStub(self._channel)
        self.browser = browser_pb2_grpc.BrowserStub(self._channel)
        self.gateway = gateway_pb2_grpc.GatewayStub(self._channel)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    def as_user(self, user: N8nUser, project_id: str | None = None) -> Metadata:
        """The call's metadata: `project_id` when the user still belongs to it, else their
        personal project."""
        project = project_id if project_id in user.project_ids else user.personal_project_id
        metadata = [
            *self._auth,
            (USER_KEY, user.id),
            (PROJECT_KEY, project),
            (PROJECTS_KEY, ",".join(sorted(user.project_ids))),
        ]
        key = self._user_keys.get(user.id) or self._user_keys.get(user.email)
        if key:
            metadata.append((ACTING_KEY_KEY, key))
        return tuple(metadata)

    async def call(
        self,
        method: Any,
        request: Any,
        user: N8nUser,
        project_id: str | None = None,
        **messages: str,
    ) -> Any:
        """`method(request)` as `user`; a refusal as the HTTP answer n8n gives for it
        (`messages`: n8n's words for a status, see `answers.from_rpc`)."""
        try:
            return await method(request, metadata=self.as_user(user, project_id))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc, **messages) from None
