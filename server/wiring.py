"""The composition root: the one place that builds the service's parts and hands each the
others it needs. Everything it imports sits below it; nothing imports it but `server/app.py`.

Each consumer gets a narrow handle: the agent its `AgentServices`, each tool group its own
services class (see `tool_services`), the servicers `ApiParts`, and the agent and every front
the one way to call a tool (`tool_calls`). `Parts` itself stays here.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import structlog

from browser_relay.headless import HeadlessBrowsers
from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSessions, sandbox_key, session_id_for
from sandbox.egress import EgressProxy
from sandbox.image.build import SEED_DIR
from server.agent import ModelProvider, provider_from_settings
from server.agent.services import AgentServices
from server.agent.structured import structured_asker
from server.api.server import ApiParts
from server.catalog import CatalogService
from server.domain.activity import ActivityStore
from server.domain.credential_store import (
    KEY_FILE_NAME,
    CredentialStore,
    Sealer,
    decode_key,
    key_from_file,
)
from server.domain.credential_tester import CredentialTester
from server.domain.data_tables import DataTableStore
from server.domain.folders import FolderStore, TagStore
from server.domain.projects import CallerProjects, ConfiguredFeatures
from server.domain.web import BraveSearch, SearxngSearch, WebFetcher, WebSearch
from server.domain.work_items import WorkItemStore
from server.domain.workflows import WorkflowStore
from server.instance import FOLDERS_FEATURE, Instance
from server.mcp import tool as mcp
from server.mcp.gateway import Gateways
from server.mcp.gateway_keys import GatewayKeys
from server.mcp.results import ThreadBlobWriter
from server.mcp.servers import McpServers
from server.n8n.client import N8nClient
from server.n8n.credential_store import N8nCredentials
from server.n8n.data_tables import N8nDataTables
from server.n8n.executions import N8nExecutions
from server.n8n.folders import N8nFolders
from server.n8n.licence import N8nFeatures
from server.n8n.probe import InstanceProbe
from server.n8n.tags import N8nTags
from server.n8n.workflows import N8nWorkflows
from server.pipeline.build import WorkflowBuilder
from server.pipeline.credential_types import CredentialTypeIndex
from server.pipeline.runs import WorkflowRunner
from server.pipeline.verify import Verifier
from server.pipeline.work import WorkLoop
from server.records.sandbox_runs import ExecutionStore
from server.runtime.attachments import Attachments
from server.runtime.background import BackgroundTasks
from server.runtime.captured_secrets import CapturedSecrets
from server.runtime.conversation import Conversation
from server.runtime.conversation_history import ConversationHistory
from server.runtime.egress import (
    egress_policy,
    npm_registry,
    service_egress_policy,
    trusted_hosts,
)
from server.runtime.events import EventLog
from server.runtime.hitl import Hitl
from server.runtime.plans import Plans
from server.runtime.replicas import Replicas, open_replica
from server.runtime.sandbox_api_keys import SandboxApiKeys
from server.runtime.sandboxes import SandboxService
from server.runtime.service_sandboxes import ServiceSandboxes, sandbox_egress
from server.runtime.thread_directory import ThreadDirectory
from server.runtime.thread_history import ThreadHistory
from server.runtime.threads import Threads
from server.settings import Settings, effective_permissions
from server.store import Database
from server.tools import (
    activity,
    agents_module,
    attachments,
    browser,
    browser_credentials,
    build,
    conversation_history,
    credential_setup,
    credentials,
    data_tables,
    docs,
    executions,
    loading,
    nodes,
    orchestration,
    projects,
    verify,
    web,
    workflow_checks,
    workflows,
    workspace,
)
from server.tools.calls import ToolCalls
from server.tools.registry import ToolRegistry
from server.tools.skills import SkillLibrary
from server.tools.spec import ToolSpec

if TYPE_CHECKING:
    from browser_relay.driver import Drivers

__all__ = [
    "ALL_TOOLS",
    "Parts",
    "credential_store",
    "embedded_instance",
    "n8n_client",
    "n8n_instance",
    "tool_calls",
    "tool_registry",
]

log = structlog.get_logger(__name__)


# Every tool of the service, group by group (each group's services: `Parts.tool_services`).
ALL_TOOLS: list[ToolSpec[Any]] = [
    *loading.TOOLS,
    *orchestration.TOOLS,
    *workspace.TOOLS,
    *build.TOOLS,
    *verify.TOOLS,
    *workflows.TOOLS,
    *workflow_checks.TOOLS,
    *executions.TOOLS,
    *nodes.TOOLS,
    *data_tables.TOOLS,
    *projects.TOOLS,
    *credentials.TOOLS,
    *credential_setup.TOOLS,
    *web.TOOLS,
    *docs.TOOLS,
    *attachments.TOOLS,
    *browser.TOOLS,
    *browser_credentials.TOOLS,
    *agents_module.TOOLS,
    *mcp.TOOLS,
    *activity.TOOLS,
    *conversation_history.TOOLS,
]
# The names a tool from MCP may not take.
RESERVED_TOOL_NAMES = frozenset(spec.name for spec in ALL_TOOLS)


@dataclass(kw_only=True)
class Parts:
    """Every part of one server process, as built by `Parts.open`."""

    settings: Settings
    db: Database
    replicas: Replicas
    events: EventLog
    threads: Threads
    hitl: Hitl
    plans: Plans
    background: BackgroundTasks
    conversation: Conversation
    attachments: Attachments
    sandboxes: SandboxService
    catalog: CatalogService
    instance: Instance
    builder: WorkflowBuilder
    runner: WorkflowRunner
    loop: WorkLoop
    verifier: Verifier
    web: WebFetcher
    web_search: WebSearch | None
    credential_tester: CredentialTester
    relay: RelayServer
    headless: HeadlessBrowsers
    drivers: Drivers | None
    n8n: N8nClient | None
    n8n_probe: InstanceProbe | None
    mcp_servers: McpServers
    gateways: Gateways
    gateway_keys: GatewayKeys
    sandbox_api_keys: SandboxApiKeys
    # The sandbox service API's sandboxes (None: INSTANCE_AI_SANDBOX_API_ADDRESS unset).
    service_sandboxes: ServiceSandboxes | None = None
    judge_model: ModelProvider | None = None
    # The skills the orchestrator loads (they ship with the service).
    skills: SkillLibrary = field(default_factory=SkillLibrary)
    # Secrets the browser tools captured for credentials being made (in memory only).
    captured_secrets: CapturedSecrets = field(default_factory=CapturedSecrets)

    @classmethod
    async def open(cls, settings: Settings) -> Parts:
        db = await Database.open(settings.resolved_database_url)
        replicas, events = await open_replica(
            db,
            url=settings.resolved_database_url,
            lease_s=settings.replica_lease_seconds,
            subscriber_buffer=settings.subscriber_buffer,
        )
        background = BackgroundTasks(
            events=events,
            limit=settings.background_task_limit,
            timeout_s=settings.background_task_timeout_seconds,
            replicas=replicas,
        )
        threads = Threads(db=db, events=events, background=background.running, replica=replicas.id)
        hitl = Hitl(
            db=db,
            events=events,
            modes=effective_permissions(
                settings.permissions, branch_read_only=settings.branch_read_only
            ),
        )
        registry_url = trusted = None
        if settings.sandbox_api_address is not None:
            registry_url = await asyncio.to_thread(npm_registry, settings)
            trusted = await asyncio.to_thread(trusted_hosts, settings, registry_url)
        sandboxes = SandboxService(
            settings,
            db,
            thread_known=threads.exists,
            egress=EgressProxy(egress_policy(settings, hitl)),
            service_egress=EgressProxy(
                service_egress_policy(settings, trusted, functools.partial(sandbox_egress, db))
            )
            if trusted is not None
            else None,
            replicas=replicas,
        )
        try:
            await sandboxes.start()
        except BaseException:
            await replicas.close()
            await events.close()
            await db.close()
            raise
        catalog = CatalogService(sandboxes.catalog_dir)
        service_sandboxes = None
        if settings.sandbox_api_address is not None:
            service_sandboxes = ServiceSandboxes(
                settings,
                db,
                sandboxes,
                npm_registry=registry_url,
                replicas=replicas,
            )
            service_sandboxes.start()
        n8n = n8n_client(settings)
        n8n_probe: InstanceProbe | None = None
        if n8n is None:
            instance = embedded_instance(settings, db)
        else:
            # The probe watches n8n for health and refreshes what its licence allows.
            features = N8nFeatures(n8n)
            n8n_probe = InstanceProbe(
                n8n.base_url, interval_s=settings.n8n_probe_seconds, refresh=features.refresh
            )
            await n8n_probe.start()
            instance = n8n_instance(settings, db, n8n, features)
        # The builder's own model client (the simulation plan's pass), closed with the parts.
        judge_model = provider_from_settings(settings) if settings.simulation_model_pass else None
        builder = WorkflowBuilder(
            sandboxes=sandboxes.for_thread,
            catalog=catalog,
            workflows=instance.workflows,
            credentials=lambda caller: instance.credentials.all(sorted(caller.project_ids)),
            judge=structured_asker(judge_model, max_tokens=settings.model_max_tokens)
            if judge_model is not None
            else None,
            judge_timeout_s=settings.simulation_model_timeout_seconds,
            max_source_bytes=settings.build_max_source_bytes,
            compile_timeout_s=settings.build_compile_timeout_seconds,
            diagnostics_timeout_s=settings.build_diagnostics_timeout_seconds,
        )
        runner = WorkflowRunner(
            builder=builder,
            catalog=catalog,
            workflows=instance.workflows,
            executions=instance.executions,
            credentials=instance.credentials,
            secrets=instance.secrets,
        )
        loop = WorkLoop(WorkItemStore(db))
        verifier = Verifier(
            builder=builder,
            catalog=catalog,
            workflows=instance.workflows,
            runner=runner,
            loop=loop,
        )
        relay = await RelayServer(
            BrowserSessions(),
            host=settings.browser_relay_host,
            port=settings.browser_relay_port,
            public_url=settings.browser_relay_public_url,
        ).start()
        log.info("browser relay listening", url=relay.http_url)
        headless = HeadlessBrowsers(relay, idle_seconds=settings.browser_sandbox_idle_seconds)
        drivers = _drivers()

        async def thread_deleted(thread_id: str) -> None:
            # Its sandboxed browser first (the sandbox's removal would end it less tidily).
            session_id = session_id_for(sandbox_key(thread_id))
            if drivers is not None:
                await drivers.drop(session_id)
            await headless.stop(sandbox_key(thread_id))
            relay.sessions.forget(session_id)
            await sandboxes.destroy(thread_id)

        threads.on_deleted = thread_deleted
        mcp_servers = McpServers(
            settings.mcp_servers,
            reserved=RESERVED_TOOL_NAMES,
            store_blob=_workspace_writer(sandboxes),
            call_timeout_s=settings.mcp_call_timeout_seconds,
            connect_timeout_s=settings.mcp_connect_timeout_seconds,
        )
        mcp_servers.start()
        gateways = Gateways(
            events=events,
            reserved=RESERVED_TOOL_NAMES,
            call_timeout_s=settings.mcp_call_timeout_seconds,
            connect_timeout_s=settings.mcp_connect_timeout_seconds,
        )
        timeout = settings.web_fetch_timeout_seconds
        allow = frozenset(settings.web_fetch_allow_hosts)
        return cls(
            settings=settings,
            db=db,
            replicas=replicas,
            events=events,
            threads=threads,
            hitl=hitl,
            plans=Plans(db=db, events=events),
            background=background,
            conversation=Conversation(db=db),
            attachments=Attachments(db=db),
            sandboxes=sandboxes,
            catalog=catalog,
            instance=instance,
            builder=builder,
            runner=runner,
            loop=loop,
            verifier=verifier,
            web=WebFetcher(timeout_s=timeout, allow=allow),
            web_search=_web_search(settings),
            credential_tester=CredentialTester(timeout_s=timeout, allow=allow),
            relay=relay,
            headless=headless,
            drivers=drivers,
            n8n=n8n,
            n8n_probe=n8n_probe,
            judge_model=judge_model,
            mcp_servers=mcp_servers,
            gateways=gateways,
            gateway_keys=GatewayKeys(db),
            service_sandboxes=service_sandboxes,
            sandbox_api_keys=SandboxApiKeys(
                db, [k.get_secret_value() for k in settings.sandbox_api_keys]
            ),
        )

    async def close(self) -> None:
        await self.background.cancel_all()
        # Gateways are connections of the HTTP endpoint, which ends them when it closes.
        await self.mcp_servers.close()
        if self.drivers is not None:
            await self.drivers.close()
        await self.headless.close()
        await self.relay.close()
        if self.service_sandboxes is not None:
            await self.service_sandboxes.close()
        await self.sandboxes.close()
        await self.replicas.close()
        await self.events.close()
        if self.n8n_probe is not None:
            await self.n8n_probe.close()
        if self.n8n is not None:
            await self.n8n.close()
        if self.judge_model is not None:
            await self.judge_model.close()
        await self.db.close()

    # -- the narrow handles -----------------------------------------------------------------

    def agent_services(self) -> AgentServices:
        return AgentServices(
            settings=self.settings,
            events=self.events,
            threads=self.threads,
            hitl=self.hitl,
            conversation=self.conversation,
            attachments=self.attachments,
            plans=self.plans,
            background=self.background,
            sandbox_for=self.sandboxes.for_thread,
            skills=self.skills,
            replicas=self.replicas,
            loop=self.loop,
        )

    def credential_types(self) -> CredentialTypeIndex:
        return CredentialTypeIndex(self.catalog, self.instance.credential_types)

    def api_parts(self) -> ApiParts:
        return ApiParts(
            events=self.events,
            threads=self.threads,
            directory=ThreadDirectory(db=self.db),
            history=ThreadHistory(db=self.db),
            background=self.background,
            sandboxes=self.sandboxes,
            credentials=self.instance.credentials,
            credential_types=self.credential_types(),
            relay=self.relay,
            instance_probe=self.n8n_probe,
            gateways=self.gateways,
            gateway_keys=self.gateway_keys,
        )

    def tool_services(self) -> list[object]:
        """One services object per tool group: what that group's handlers may touch."""
        instance = self.instance
        return [
            loading.ToolLoadingTools(skills=self.skills, conversation=self.conversation),
            orchestration.OrchestrationTools(plans=self.plans, background=self.background),
            workspace.WorkspaceTools(sandbox_for=self.sandboxes.for_thread),
            build.BuildTools(
                builder=self.builder,
                loop=self.loop,
                hitl=self.hitl,
                workflows=instance.workflows,
            ),
            verify.VerifyTools(
                workflows=instance.workflows,
                verifier=self.verifier,
                loop=self.loop,
                builder=self.builder,
            ),
            workflows.WorkflowTools(
                workflows=instance.workflows,
                credentials=instance.credentials,
                features=instance.features,
                builder=self.builder,
                catalog=self.catalog,
                hitl=self.hitl,
                events=self.events,
            ),
            workflow_checks.WorkflowCheckTools(
                workflows=instance.workflows,
                credentials=instance.credentials,
                executions=instance.executions,
                builder=self.builder,
                catalog=self.catalog,
            ),
            activity.ActivityTools(activity=instance.activity),
            conversation_history.ConversationHistoryTools(history=ConversationHistory(db=self.db)),
            executions.ExecutionTools(
                workflows=instance.workflows,
                executions=instance.executions,
                runner=self.runner,
                catalog=self.catalog,
            ),
            nodes.NodeTools(
                catalog=self.catalog,
                builder=self.builder,
                credentials=instance.credentials,
                secrets=instance.secrets,
                credential_types=self.credential_types(),
            ),
            data_tables.DataTableTools(data_tables=instance.data_tables),
            projects.ProjectTools(
                projects=instance.projects,
                workflows=instance.workflows,
                executions=instance.executions,
                folders=instance.folders,
                features=instance.features,
                tags=instance.tags,
            ),
            credentials.CredentialTools(
                credentials=instance.credentials,
                secrets=instance.secrets,
                checks=instance.checks,
                workflows=instance.workflows,
                catalog=self.catalog,
                tester=self.credential_tester,
                hitl=self.hitl,
                credential_types=self.credential_types(),
                docs_origin=self.settings.docs_url,
            ),
            web.WebTools(fetcher=self.web, search=self.web_search, hitl=self.hitl),
            attachments.AttachmentTools(attachments=self.attachments),
            docs.DocsTools(
                catalog=self.catalog,
                knowledge_base=SEED_DIR / "knowledge-base",
                origin=self.settings.docs_url,
                fetcher=self.web,
                hitl=self.hitl,
            ),
            browser.BrowserTools(
                relay=self.relay,
                drivers=self.drivers,
                headless=self.headless,
                sandbox_for=self.sandboxes.for_thread,
                in_sandbox=self.settings.browser == "sandbox",
                secrets=self.captured_secrets,
                credentials=instance.credentials,
                credential_types=self.credential_types(),
                hitl=self.hitl,
            ),
            agents_module.AgentsModuleTools(),
            mcp.McpTools(
                servers=self.mcp_servers,
                gateways=self.gateways,
                gateways_enabled=self.settings.http_port is not None,
            ),
            # The services of the tools MCP servers and gateways offer.
            self.mcp_servers,
            self.gateways,
        ]


def tool_calls(parts: Parts) -> ToolCalls:
    """The one way every caller calls a tool: the catalogue (`tool_registry`) with the event
    log and the permission rule."""
    registry = tool_registry(parts)
    return ToolCalls(
        registry, events=parts.events, hitl=parts.hitl, thread_exists=parts.threads.exists
    )


def tool_registry(parts: Parts) -> ToolRegistry:
    """Every tool, bound to its group's services; the tools that load tools learn which they
    may load (the registered ones outside the core) once the registry exists."""
    services = parts.tool_services()
    registry = ToolRegistry(ALL_TOOLS, services, sources=[parts.mcp_servers, parts.gateways])
    for group in services:
        if isinstance(group, loading.ToolLoadingTools):
            group.offer(
                lambda: (
                    (spec.name, spec.description)
                    for spec, _ in registry.listed()
                    if spec.name not in loading.CORE_TOOLS and spec.group != loading.GROUP
                )
            )
    return registry


def embedded_instance(settings: Settings, db: Database) -> Instance:
    """The standalone default: the instance kept in this service's own database."""
    credential_data = credential_store(settings, db)
    return Instance(
        workflows=WorkflowStore(db),
        executions=ExecutionStore(db),
        credentials=credential_data,
        secrets=credential_data,
        data_tables=DataTableStore(db),
        folders=FolderStore(db),
        tags=TagStore(db),
        projects=CallerProjects(),
        # The embedded store's folders need no licence.
        features=ConfiguredFeatures([*settings.licensed_features, FOLDERS_FEATURE]),
        activity=ActivityStore(db),
    )


def n8n_client(settings: Settings) -> N8nClient | None:
    """The n8n instance's API client, when the instance is n8n."""
    if settings.instance != "n8n" or settings.n8n_url is None:
        return None
    key = settings.service_n8n_key()
    assert key is not None  # the settings refuse instance=n8n without one
    return N8nClient(settings.n8n_url, key, timeout_s=settings.n8n_timeout_seconds)


def n8n_instance(
    settings: Settings, db: Database, client: N8nClient, features: N8nFeatures
) -> Instance:
    """The user's n8n as the system of record: workflows (with their versions, archive and
    publishing), tags, data tables and credentials in n8n (their secrets never come back:
    n8n tests them); executions from both sides (the sandbox's runs are recorded here).
    Folders are n8n's where its licence allows (`features` finds out while the service
    runs)."""
    embedded = embedded_instance(settings, db)
    credentials = N8nCredentials(client)
    workflows = N8nWorkflows(client, db)
    return replace(
        embedded,
        workflows=workflows,
        tags=N8nTags(client),
        data_tables=N8nDataTables(client),
        credentials=credentials,
        secrets=None,
        checks=credentials,
        credential_types=credentials,
        executions=N8nExecutions(ExecutionStore(db), client),
        folders=N8nFolders(client, workflows),
        features=features,
        # n8n keeps its activity log to itself (not in its public API).
        activity=None,
    )


def credential_store(settings: Settings, db: Database) -> CredentialStore:
    """The credential store with the configured keys (see server/domain/credential_store.py)."""
    return CredentialStore(db, _sealer(settings))


def _sealer(settings: Settings) -> Sealer:
    if settings.credentials_key is not None:
        key = decode_key(settings.credentials_key.get_secret_value(), "INSTANCE_AI_CREDENTIALS_KEY")
    else:
        key = key_from_file(settings.data_dir / KEY_FILE_NAME)
    previous = [
        decode_key(k.get_secret_value(), "INSTANCE_AI_CREDENTIALS_PREVIOUS_KEYS")
        for k in settings.credentials_previous_keys
    ]
    return Sealer(key, previous)


def _workspace_writer(sandboxes: SandboxService) -> ThreadBlobWriter:
    """Stores a blob in a thread's workspace (an MCP tool's image, say), returns its path."""

    async def write(thread_id: str, path: str, data: bytes) -> str:
        manager = await sandboxes.for_thread(thread_id)
        await manager.write_file(thread_id, path, data)
        return path

    return write


def _drivers() -> Drivers | None:
    """Playwright drivers for the browser tools, when the `browser` extra is installed."""
    if importlib.util.find_spec("playwright") is None:
        log.info("browser tools off: Playwright is not installed (the `browser` extra)")
        return None
    from browser_relay.driver import Drivers

    return Drivers()


def _web_search(settings: Settings) -> WebSearch | None:
    """Brave first, then SearXNG; None: web-search is not registered."""
    timeout = settings.web_fetch_timeout_seconds
    if settings.brave_search_api_key is not None:
        key = settings.brave_search_api_key.get_secret_value()
        return WebSearch(BraveSearch(key, timeout_s=timeout))
    if settings.searxng_url:
        return WebSearch(SearxngSearch(settings.searxng_url, timeout_s=timeout))
    return None
