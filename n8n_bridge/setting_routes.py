"""The routes n8n's editor reads around a conversation: credits, the user's preferences, the
admin's settings page, and the links that connect a person's browser or a folder (the
service's Browser and Gateway services). The model, permissions and sandbox are configured
where the service runs, so n8n's forms for them answer as for environment-managed fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from instance_ai.v1 import browser_pb2, gateway_pb2
from n8n_bridge.answers import BridgeHttpError, data, timestamp_iso
from n8n_bridge.guard import MANAGE_SCOPE, Guard
from n8n_bridge.n8n_user import N8nUser
from n8n_bridge.service import Service

__all__ = ["SettingRoutes"]


class SettingRoutes:
    def __init__(self, service: Service, *, model_name: str) -> None:
        self._service = service
        self._model_name = model_name

    def table(self, guard: Guard) -> list[BaseRoute]:
        manage = MANAGE_SCOPE
        return [
            Route("/credits", guard(self.credits), methods=["GET"]),
            Route("/preferences", guard(self.preferences), methods=["GET", "PUT"]),
            Route("/settings", guard(self.settings, manage), methods=["GET", "PUT"]),
            Route("/settings/models", guard(self.models, manage), methods=["GET"]),
            Route(
                "/settings/service-credentials", guard(self.no_credentials, manage), methods=["GET"]
            ),
            Route(
                "/settings/model-credentials", guard(self.no_credentials, manage), methods=["GET"]
            ),
            Route("/browser/create-link", guard(self.browser_link), methods=["POST"]),
            Route("/browser/status", guard(self.browser_status), methods=["GET"]),
            Route("/gateway/create-link", guard(self.gateway_link), methods=["POST"]),
            Route("/gateway/status", guard(self.gateway_status), methods=["GET"]),
        ]

    async def credits(self, request: Request, user: N8nUser) -> Response:
        # The service meters nothing: unlimited, as n8n says for a self-hosted model.
        return data({"creditsQuota": -1, "creditsClaimed": 0})

    async def preferences(self, request: Request, user: N8nUser) -> Response:
        if request.method == "PUT":
            raise BridgeHttpError(
                422,
                "Cannot update service-managed fields: the assistant's model and gateway are "
                "set where instance-ai runs",
            )
        return data(
            {
                "credentialId": None,
                "credentialType": None,
                "credentialName": None,
                "modelName": self._model_name,
                "localGatewayDisabled": False,
            }
        )

    async def settings(self, request: Request, user: N8nUser) -> Response:
        if request.method == "PUT":
            raise BridgeHttpError(
                422,
                "Cannot update environment-managed fields: the assistant is configured where "
                "instance-ai runs (its INSTANCE_AI_* settings)",
            )
        return data(_admin_settings(self._model_name))

    async def models(self, request: Request, user: N8nUser) -> Response:
        # The model is chosen where the service runs, not from n8n's catalog.
        return data({"models": {"anthropic": [], "openai": [], "openrouter": []}})

    async def no_credentials(self, request: Request, user: N8nUser) -> Response:
        # No n8n credential configures the service's model, sandbox or search.
        return data([])

    async def browser_link(self, request: Request, user: N8nUser) -> Response:
        link = await self._service.call(
            self._service.browser.CreateConnectLink, browser_pb2.CreateConnectLinkRequest(), user
        )
        expires = link.expires_at.ToDatetime(tzinfo=UTC)
        return data(
            {
                "connectUrl": link.setup_url,
                "expiresAt": timestamp_iso(link.expires_at),
                "ttlSeconds": max(0, int((expires - datetime.now(UTC)).total_seconds())),
            }
        )

    async def browser_status(self, request: Request, user: N8nUser) -> Response:
        session = await self._service.call(
            self._service.browser.GetBrowserSession, browser_pb2.GetBrowserSessionRequest(), user
        )
        connected = session.state == "connected"
        return data(
            {
                "connected": connected,
                "connectedAt": timestamp_iso(session.connected_at) if connected else None,
                "toolCategories": [{"name": "browser", "enabled": True}] if connected else [],
            }
        )

    async def gateway_link(self, request: Request, user: N8nUser) -> Response:
        key = await self._service.call(
            self._service.gateway.CreateGatewayKey, gateway_pb2.CreateGatewayKeyRequest(), user
        )
        return data(
            {"token": key.key, "command": key.command, "expiresAt": None, "ttlSeconds": None}
        )

    async def gateway_status(self, request: Request, user: N8nUser) -> Response:
        gateway = await self._service.call(
            self._service.gateway.GetGateway, gateway_pb2.GetGatewayRequest(), user
        )
        categories = [{"name": "filesystem", "enabled": True, "writeAccess": gateway.write_access}]
        return data(
            {
                "connected": gateway.connected,
                "connectedAt": timestamp_iso(gateway.connected_at) if gateway.connected else None,
                "directory": gateway.root_path or None,
                "hostIdentifier": gateway.host_identifier or None,
                "toolCategories": categories if gateway.connected else [],
            }
        )


def _admin_settings(model_name: str) -> dict[str, Any]:
    """n8n's admin settings, as far as they concern this service: on, configured where the
    service runs (every field environment-managed), its permission modes its own."""
    return {
        "enabled": True,
        "mcpAccessEnabled": False,
        "sandboxEnabled": True,
        "sandboxProvider": "n8n-sandbox",
        "daytonaCredentialId": None,
        "n8nSandboxCredentialId": None,
        "searchCredentialId": None,
        "modelCredentialId": None,
        "modelName": model_name,
        "modelEnvConfigured": True,
        "sandboxEnvConfigured": True,
        "searchEnvConfigured": True,
        "searchDisabled": False,
        "n8nSandboxServiceUrl": None,
        "localGatewayDisabled": False,
        "browserUseEnabled": True,
    }
