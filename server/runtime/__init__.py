"""The runtime: the durable per-thread event log, threads and runs, and the services built on
them (sandboxes, the catalog, the workflow store, the builder, the conversation history,
HITL confirmations, plans and background tasks). One per server process."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from browser_relay.driver import Drivers
from browser_relay.headless import HeadlessBrowsers
from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSessions, sandbox_key, session_id_for
from sandbox.egress import EgressProxy
from server.catalog import CatalogService
from server.domain.credential_test import CredentialTester
from server.domain.credentials import (
    KEY_FILE_NAME,
    CredentialStore,
    Sealer,
    decode_key,
    key_from_file,
)
from server.domain.data_tables import DataTableStore
from server.domain.executions import ExecutionStore
from server.domain.folders import FolderStore, TagStore
from server.domain.web import BraveSearch, SearxngSearch, WebFetcher, WebSearch
from server.domain.work_items import WorkItemStore
from server.domain.workflows import WorkflowStore
from server.pipeline.build import WorkflowBuilder
from server.pipeline.runs import WorkflowRunner
from server.pipeline.verify import Verifier
from server.pipeline.work import WorkLoop
from server.runtime.background import BackgroundTasks
from server.runtime.conversation import Conversation
from server.runtime.egress import egress_policy
from server.runtime.events import Event, EventLog
from server.runtime.hitl import Hitl
from server.runtime.plans import Plans
from server.runtime.sandboxes import SandboxService
from server.runtime.threads import Threads, ThreadStatus
from server.settings import Settings
from server.store import Database

log = structlog.get_logger(__name__)

__all__ = ["Event", "EventLog", "Runtime", "SandboxService", "ThreadStatus", "Threads"]


@dataclass(kw_only=True)
class Runtime:
    """What the servicers call into: one per server process."""

    settings: Settings
    db: Database
    events: EventLog
    threads: Threads
    sandboxes: SandboxService
    catalog: CatalogService
    workflows: WorkflowStore
    builder: WorkflowBuilder
    executions: ExecutionStore
    runner: WorkflowRunner
    loop: WorkLoop
    verifier: Verifier
    conversation: Conversation
    hitl: Hitl
    plans: Plans
    background: BackgroundTasks
    data_tables: DataTableStore
    folders: FolderStore
    tags: TagStore
    credentials: CredentialStore
    web: WebFetcher
    credential_tester: CredentialTester
    web_search: WebSearch | None
    browser: RelayServer
    browsers: Drivers
    headless: HeadlessBrowsers

    @classmethod
    async def open(cls, settings: Settings) -> Runtime:
        db = await Database.open(settings.resolved_database_url)
        events = EventLog(db=db, subscriber_buffer=settings.subscriber_buffer)
        events.start()
        background = BackgroundTasks(events=events, limit=settings.background_task_limit)
        threads = Threads(db=db, events=events, background=background.running)
        hitl = Hitl(db=db, events=events, modes=dict(settings.permissions))
        sandboxes = SandboxService(
            settings,
            db,
            thread_known=threads.exists,
            egress=EgressProxy(egress_policy(settings, hitl)),
        )
        try:
            await sandboxes.start()
        except BaseException:
            await events.close()
            await db.close()
            raise
        catalog = CatalogService(sandboxes.catalog_dir)
        workflows = WorkflowStore(db)
        builder = WorkflowBuilder(
            sandboxes=sandboxes.for_thread,
            catalog=catalog,
            workflows=workflows,
            max_source_bytes=settings.build_max_source_bytes,
            compile_timeout_s=settings.build_compile_timeout_seconds,
            diagnostics_timeout_s=settings.build_diagnostics_timeout_seconds,
        )
        executions = ExecutionStore(db)
        credentials = credential_store(settings, db)
        runner = WorkflowRunner(
            builder=builder,
            catalog=catalog,
            workflows=workflows,
            executions=executions,
            credentials=credentials,
        )
        loop = WorkLoop(WorkItemStore(db))
        verifier = Verifier(
            builder=builder, catalog=catalog, workflows=workflows, runner=runner, loop=loop
        )
        browser = await RelayServer(
            BrowserSessions(),
            host=settings.browser_relay_host,
            port=settings.browser_relay_port,
            public_url=settings.browser_relay_public_url,
        ).start()
        log.info("browser relay listening", url=browser.http_url)
        headless = HeadlessBrowsers(browser, idle_seconds=settings.browser_sandbox_idle_seconds)
        drivers = Drivers()

        async def thread_deleted(thread_id: str) -> None:
            # Its sandboxed browser first (the sandbox's removal would end it less tidily).
            session_id = session_id_for(sandbox_key(thread_id))
            await drivers.drop(session_id)
            await headless.stop(sandbox_key(thread_id))
            browser.sessions.forget(session_id)
            await sandboxes.destroy(thread_id)

        threads.on_deleted = thread_deleted
        return cls(
            browser=browser,
            browsers=drivers,
            headless=headless,
            conversation=Conversation(db=db),
            hitl=hitl,
            plans=Plans(db=db, events=events),
            background=background,
            data_tables=DataTableStore(db),
            folders=FolderStore(db),
            credentials=credentials,
            web=WebFetcher(
                timeout_s=settings.web_fetch_timeout_seconds,
                allow=frozenset(settings.web_fetch_allow_hosts),
            ),
            web_search=_web_search(settings),
            credential_tester=CredentialTester(
                timeout_s=settings.web_fetch_timeout_seconds,
                allow=frozenset(settings.web_fetch_allow_hosts),
            ),
            tags=TagStore(db),
            executions=executions,
            runner=runner,
            loop=loop,
            verifier=verifier,
            settings=settings,
            db=db,
            events=events,
            threads=threads,
            sandboxes=sandboxes,
            catalog=catalog,
            workflows=workflows,
            builder=builder,
        )

    async def close(self) -> None:
        await self.background.cancel_all()
        await self.browsers.close()
        await self.headless.close()
        await self.browser.close()
        await self.sandboxes.close()
        await self.events.close()
        await self.db.close()


def credential_store(settings: Settings, db: Database) -> CredentialStore:
    """The credential store with the configured keys (see server/domain/credentials.py)."""
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


def _web_search(settings: Settings) -> WebSearch | None:
    """Brave first, then SearXNG; None: web-search is not registered."""
    timeout = settings.web_fetch_timeout_seconds
    if settings.brave_search_api_key is not None:
        key = settings.brave_search_api_key.get_secret_value()
        return WebSearch(BraveSearch(key, timeout_s=timeout))
    if settings.searxng_url:
        return WebSearch(SearxngSearch(settings.searxng_url, timeout_s=timeout))
    return None
