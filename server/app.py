"""The service as one object: its parts (built by the composition root, `server/wiring.py`)
plus the gRPC server, with an orderly start and stop."""

from __future__ import annotations

import enum
from dataclasses import replace

import structlog

from server.agent import Agent, provider_from_settings
from server.api.asgi import AsgiServer
from server.api.http import HttpEndpoint
from server.api.sandbox_api import SandboxApi
from server.api.server import GrpcServer, listen_host, start_grpc_server
from server.errors import UnavailableError
from server.settings import Settings
from server.tools.calls import ToolCalls
from server.wiring import Parts, tool_calls

__all__ = ["Application"]

log = structlog.get_logger(__name__)


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


class Application:
    """`async with Application(settings) as app:` serves on `app.port` until the block ends."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._state = _State.NEW
        self._parts: Parts | None = None
        self._agent: Agent | None = None
        self._grpc: GrpcServer | None = None
        self._http: HttpEndpoint | None = None
        self._sandbox_api: AsgiServer | None = None

    @property
    def parts(self) -> Parts:
        if self._parts is None:
            raise RuntimeError("the application is not running")
        return self._parts

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            raise RuntimeError("the application is not running")
        return self._agent

    @property
    def grpc(self) -> GrpcServer:
        if self._grpc is None:
            raise RuntimeError("the application is not running")
        return self._grpc

    @property
    def http_url(self) -> str | None:
        """The HTTP endpoint's URL (MCP at /mcp, gateways at /gateway), None when off."""
        return self._http.url if self._http is not None else None

    @property
    def sandbox_api_url(self) -> str | None:
        """The sandbox service API's URL, None when off."""
        if self._sandbox_api is None or self.settings.sandbox_api_address is None:
            return None
        host = self.settings.sandbox_api_address.rpartition(":")[0]
        scheme = "https" if self.settings.tls_cert_file else "http"
        return f"{scheme}://{host}:{self._sandbox_api.port}"

    @property
    def port(self) -> int:
        return self.grpc.port

    @property
    def address(self) -> str:
        return self.grpc.address

    async def start(self) -> None:
        if self._state is not _State.NEW:
            raise RuntimeError("an Application cannot be restarted; make a new one")
        self._state = _State.RUNNING
        parts = self._parts = await Parts.open(self.settings)
        calls = tool_calls(parts)
        self._agent = Agent(parts.agent_services(), calls, provider_from_settings(self.settings))
        try:
            await self._agent.start()
            self._http = await self._start_http(calls)
            self._sandbox_api = await self._start_sandbox_api()
            api_parts = replace(parts.api_parts(), http_url=self._http.url if self._http else None)
            self._grpc = await start_grpc_server(self.settings, api_parts, self._agent, calls)
            await parts.replicas.advertise(self._grpc.address)
        except (RuntimeError, OSError) as exc:  # grpc raises RuntimeError when it cannot bind
            if self._http is not None:
                await self._http.close()
            if self._sandbox_api is not None:
                await self._sandbox_api.close()
            await self._agent.close()
            await parts.close()
            self._state = _State.STOPPED
            raise UnavailableError(
                f"cannot listen ({exc}); choose another --port / INSTANCE_AI_HTTP_PORT / "
                "INSTANCE_AI_SANDBOX_API_ADDRESS or stop what holds it"
            ) from None

    async def _start_http(self, calls: ToolCalls) -> HttpEndpoint | None:
        """The HTTP endpoint (MCP, gateways), when INSTANCE_AI_HTTP_PORT is set."""
        settings = self.settings
        if settings.http_port is None:
            return None
        keys = settings.accepted_api_keys()
        return await HttpEndpoint(
            calls=calls,
            gateways=self.parts.gateways,
            gateway_keys=self.parts.gateway_keys,
            api_keys=keys,
            host=listen_host(settings, keys),
            port=settings.http_port,
            public_url=settings.http_public_url,
        ).start()

    async def _start_sandbox_api(self) -> AsgiServer | None:
        """The sandbox service API, when INSTANCE_AI_SANDBOX_API_ADDRESS is set; TLS as the
        gRPC port's."""
        settings, parts = self.settings, self.parts
        if settings.sandbox_api_address is None or parts.service_sandboxes is None:
            return None
        host, _, port = settings.sandbox_api_address.rpartition(":")
        api = SandboxApi(
            sandboxes=parts.service_sandboxes,
            keys=parts.sandbox_api_keys,
            max_file_bytes=settings.sandbox_api_max_file_bytes,
            max_inflight=settings.sandbox_api_max_inflight,
        )
        tls = None
        if settings.tls_cert_file is not None and settings.tls_key_file is not None:
            tls = (settings.tls_cert_file, settings.tls_key_file)
        server = AsgiServer("the sandbox API")
        await server.start(api.app(), host.strip("[]"), int(port), tls=tls)
        self._sandbox_api = server
        log.info("sandbox service API listening", url=self.sandbox_api_url)
        return server

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking calls, let in-flight calls finish for up to `grace` seconds (default:
        the setting), end live event streams at once (they can resume), then close the store.
        Idempotent."""
        if self._state is not _State.RUNNING:
            return
        self._state = _State.STOPPED
        grace = self.settings.shutdown_grace_seconds if grace is None else grace
        if self._grpc is not None:
            await self._grpc.health.enter_graceful_shutdown()
            self.parts.events.end_live()
            log.info("draining in-flight calls", grace_seconds=grace)
            await self._grpc.server.stop(grace)
        if self._http is not None:
            await self._http.close()
        if self._sandbox_api is not None:
            await self._sandbox_api.close()
        if self._agent is not None:
            await self._agent.close()
        await self.parts.close()
        log.info("stopped")

    async def __aenter__(self) -> Application:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
