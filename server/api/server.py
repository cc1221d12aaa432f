"""Assemble the gRPC server: servicers, health, reflection, interceptors, listening port."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from browser_relay.server import RelayServer
from instance_ai.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    browser_pb2,
    browser_pb2_grpc,
    credentials_pb2,
    credentials_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    pipeline_pb2,
    pipeline_pb2_grpc,
    tools_pb2,
    tools_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from server.agent import Agent
from server.api.agent_servicer import AgentServicer
from server.api.browser_servicer import BrowserServicer
from server.api.credentials_servicer import CredentialsServicer
from server.api.gateway_servicer import GatewayServicer
from server.api.interceptors import (
    ActingCallerInterceptor,
    ActingKeyInterceptor,
    AuthInterceptor,
    ErrorInterceptor,
)
from server.api.pipeline_servicer import PipelineServicer
from server.api.tools_servicer import ToolsServicer
from server.api.workspace_servicer import WorkspaceServicer
from server.instance import Credentials
from server.mcp.gateway import Gateways
from server.mcp.gateway_keys import GatewayKeys
from server.n8n.probe import InstanceProbe
from server.pipeline.credential_types import CredentialTypeIndex
from server.runtime.background import BackgroundTasks
from server.runtime.events import EventLog
from server.runtime.sandboxes import SandboxService
from server.runtime.thread_directory import ThreadDirectory
from server.runtime.thread_history import ThreadHistory
from server.runtime.threads import Threads
from server.settings import Settings
from server.tools.calls import ToolCalls

__all__ = [
    "ENGINE_HEALTH_PREFIX",
    "ENGINE_SERVICES",
    "INSTANCE_HEALTH",
    "RUNTIME_HEALTH_PREFIX",
    "ApiParts",
    "GrpcServer",
    "ListingHealthServicer",
    "follow_engine",
    "follow_instance",
    "is_loopback",
    "listen_host",
    "start_grpc_server",
]

log = structlog.get_logger(__name__)


@dataclass(kw_only=True)
class GrpcServer:
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    host: str
    services: list[str]

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen_host(settings: Settings, keys: list[str]) -> str:
    """The host to bind: without API keys nothing but loopback is ever bound."""
    if keys or is_loopback(settings.host):
        return settings.host
    log.warning(
        "no API keys configured: binding 127.0.0.1 instead of the requested host; set "
        "INSTANCE_AI_API_KEYS (or INSTANCE_AI_API_KEYS_FILE) to serve other hosts",
        requested_host=settings.host,
    )
    return "127.0.0.1"


# The health service name that reports the user's n8n instance (when it is the instance).
INSTANCE_HEALTH = "n8n"

# The health entry of each container engine: this prefix and the engine's address.
ENGINE_HEALTH_PREFIX = "sandbox-engine/"
# The health entry of each engine's sandbox runtime: this prefix, the engine's address, "/"
# and the runtime (runsc or runc). NOT_SERVING: runc because the engine has no gVisor (the
# runtime setting's `auto` fell back), so sandboxes there share the host's kernel.
RUNTIME_HEALTH_PREFIX = "sandbox-runtime/"
# The health entry saying what drives each engine's sandboxes: this prefix, the engine's
# address, "/" and the driver: docker (its runtime through the engine) or runsc (runsc
# itself, sandbox/runsc_engine.py). SERVING while the engine answers.
DRIVER_HEALTH_PREFIX = "sandbox-driver/"
# The services that cannot answer anything useful without the container engine.
ENGINE_SERVICES = (
    workspace_pb2.DESCRIPTOR.services_by_name["Workspace"].full_name,
    pipeline_pb2.DESCRIPTOR.services_by_name["Pipeline"].full_name,
)


@dataclass(frozen=True, kw_only=True)
class ApiParts:
    """What the servicers translate to, besides the agent and the tool calls."""

    events: EventLog
    threads: Threads
    directory: ThreadDirectory
    history: ThreadHistory
    background: BackgroundTasks
    sandboxes: SandboxService
    credentials: Credentials
    credential_types: CredentialTypeIndex
    relay: RelayServer
    gateways: Gateways
    gateway_keys: GatewayKeys
    # Where the instance is n8n: whether it answers (health service INSTANCE_HEALTH).
    instance_probe: InstanceProbe | None = None
    # The HTTP endpoint's URL, when it is on (gateways connect there).
    http_url: str | None = None


async def follow_instance(
    probe: InstanceProbe | None, health_servicer: health.aio.HealthServicer
) -> None:
    """INSTANCE_HEALTH follows the n8n instance: NOT_SERVING while it does not answer."""
    if probe is None:
        return

    async def instance_changed(up: bool) -> None:
        await health_servicer.set(INSTANCE_HEALTH, _status(up))

    await instance_changed(probe.up)
    probe.on_change(instance_changed)


async def follow_engine(
    sandboxes: SandboxService, health_servicer: health.aio.HealthServicer
) -> None:
    """Health of the engine's services follows the engines: NOT_SERVING while none answers.
    Each engine has its own entry, `sandbox-engine/<its address>`, one for the runtime its
    sandboxes run under (RUNTIME_HEALTH_PREFIX) and one for what drives them
    (DRIVER_HEALTH_PREFIX)."""
    if not sandboxes.engine_needed:
        return

    async def engine_changed(engine: str, up: bool) -> None:
        await health_servicer.set(ENGINE_HEALTH_PREFIX + engine, _status(up))
        runtime = sandboxes.runtimes().get(engine)
        if runtime is not None:
            entry = f"{RUNTIME_HEALTH_PREFIX}{engine}/{runtime.name}"
            await health_servicer.set(entry, _status(runtime.warning is None))
            await health_servicer.set(
                f"{DRIVER_HEALTH_PREFIX}{engine}/{runtime.driver}", _status(up)
            )
        for name in ENGINE_SERVICES:
            await health_servicer.set(name, _status(sandboxes.engine_up))

    for engine, up in sandboxes.engines().items():
        await engine_changed(engine, up)
    sandboxes.on_engine_change(engine_changed)


def _status(serving: bool) -> health_pb2.HealthCheckResponse.ServingStatus.ValueType:
    return (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )


class ListingHealthServicer(health.aio.HealthServicer):  # type: ignore[misc]
    """grpc's asyncio health servicer, plus `List` (which it leaves unimplemented): how a
    client learns the entries beyond the fixed services, such as each container engine."""

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in self._server_status.items()
            }
        )


async def start_grpc_server(
    settings: Settings, parts: ApiParts, agent: Agent, calls: ToolCalls
) -> GrpcServer:
    keys = settings.accepted_api_keys()
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if keys:
        interceptors.append(AuthInterceptor(keys))
    interceptors.append(ActingKeyInterceptor())
    interceptors.append(ActingCallerInterceptor())
    interceptors.append(ErrorInterceptor())
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", settings.max_message_bytes),
            ("grpc.max_send_message_length", settings.max_message_bytes),
            # Keep idle streams (event followers) alive through proxies and NATs.
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ],
    )
    agent_pb2_grpc.add_AgentServicer_to_server(
        AgentServicer(
            agent,
            events=parts.events,
            threads=parts.threads,
            directory=parts.directory,
            history=parts.history,
            background=parts.background,
            settings=settings,
        ),
        server,
    )
    workspace_pb2_grpc.add_WorkspaceServicer_to_server(
        WorkspaceServicer(parts.sandboxes.for_thread), server
    )
    tools_pb2_grpc.add_ToolsServicer_to_server(ToolsServicer(calls), server)
    pipeline_pb2_grpc.add_PipelineServicer_to_server(PipelineServicer(calls), server)
    credentials_pb2_grpc.add_CredentialsServicer_to_server(
        CredentialsServicer(parts.credentials, parts.credential_types), server
    )
    browser_pb2_grpc.add_BrowserServicer_to_server(BrowserServicer(parts.relay), server)
    gateway_pb2_grpc.add_GatewayServicer_to_server(
        GatewayServicer(parts.gateway_keys, parts.gateways, parts.http_url), server
    )
    services = [
        agent_pb2.DESCRIPTOR.services_by_name["Agent"].full_name,
        workspace_pb2.DESCRIPTOR.services_by_name["Workspace"].full_name,
        tools_pb2.DESCRIPTOR.services_by_name["Tools"].full_name,
        pipeline_pb2.DESCRIPTOR.services_by_name["Pipeline"].full_name,
        credentials_pb2.DESCRIPTOR.services_by_name["Credentials"].full_name,
        browser_pb2.DESCRIPTOR.services_by_name["Browser"].full_name,
        gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,
    ]

    health_servicer = ListingHealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ["", *services]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    await follow_engine(parts.sandboxes, health_servicer)
    await follow_instance(parts.instance_probe, health_servicer)
    reflection.enable_server_reflection(
        [*services, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )

    host = listen_host(settings, keys)
    target = f"[{host}]:{settings.port}" if ":" in host else f"{host}:{settings.port}"
    if settings.tls_cert_file and settings.tls_key_file:
        credentials = grpc.ssl_server_credentials(
            [(settings.tls_key_file.read_bytes(), settings.tls_cert_file.read_bytes())]
        )
        port = server.add_secure_port(target, credentials)
    else:
        port = server.add_insecure_port(target)
    await server.start()
    log.info(
        "serving",
        address=f"{host}:{port}",
        tls=bool(settings.tls_cert_file),
        auth="api-key" if keys else "disabled (no API keys): loopback only",
        services=services,
    )
    return GrpcServer(
        server=server, health=health_servicer, port=port, host=host, services=services
    )
