"""The sandboxes of the sandbox service API (n8n's `@n8n/sandbox-client`), over the same
engines, managers and store as thread sandboxes (kind `service`, sandbox/kinds.py).

- **Records** (`service_sandboxes`): the caller's id, its tenant (the key it came with), whether
  it is ephemeral, its egress mode, `running` or `stopped`, and its times. Every replica reads
  the same rows, so any replica answers for any sandbox, and n8n finds its sandbox again after
  its own restart (its ids derive from its threads).
- **Tenants**: a sandbox is its tenant's alone; another tenant's is "not found", as an unknown
  one (a create with another tenant's id is a conflict).
- **Crash and wake**: a sandbox recorded `running` whose container is found dead was lost
  with its processes: it is brought back (files kept) and the request that found it fails
  once with `SandboxRestartedError` (HTTP 409, `X-Sandbox-Restarted: 1`). A `stopped` one (an
  idle stop) is woken without a word, as on n8n's service.
- **Idle**: past `sandbox_api_idle_stop_seconds` without activity a sandbox is stopped (an
  ephemeral one deleted), past `sandbox_api_idle_delete_seconds` deleted; a sandbox running a
  command is active.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from sandbox.commands import OutputCallback
from sandbox.engine import HOME_DIR
from sandbox.errors import SandboxError
from sandbox.kinds import SERVICE, service_key, service_sandbox_id
from sandbox.manager import SandboxManager
from server.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from server.runtime.executions import ExecutionGoneError, Executions
from server.runtime.replicas import Replicas
from server.runtime.sandboxes import SandboxService
from server.settings import Settings
from server.store import Database
from server.store.models import ServiceSandboxRow

__all__ = [
    "EGRESS_MODES",
    "MAX_TIMEOUT_MS",
    "SandboxConflictError",
    "SandboxRecord",
    "SandboxRestartedError",
    "ServiceSandboxes",
    "sandbox_egress",
]

log = structlog.get_logger(__name__)

# n8n's service: lowercase UUIDs only.
SANDBOX_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
EGRESS_MODES = ("public", "none")
DEFAULT_TIMEOUT_MS = 300_000
MAX_TIMEOUT_MS = 30 * 60 * 1000
MAX_EXEC_ID_CHARS = 128
# Activity is written down at most this often per sandbox (each write is a transaction).
TOUCH_EVERY = timedelta(seconds=5)
SWEEP_INTERVAL_S = 30.0
# What replicas ask each other about executions (Replicas.ask), and how big an answer may be
# (a PostgreSQL notification holds 8,000 bytes).
ASK_EVENTS = "sandbox-api-exec-events"
ASK_KILL = "sandbox-api-exec-kill"
REPLY_BYTES = 6000
# How often a follower on another replica asks for new events.
REMOTE_POLL_S = 0.1


class SandboxRestartedError(FailedPreconditionError):
    """The sandbox's container had died; it was brought back with its files, without the
    processes it ran (HTTP 409 with `X-Sandbox-Restarted: 1`)."""


class SandboxConflictError(FailedPreconditionError):
    """A create that names another tenant's sandbox, or asks another egress (HTTP 409)."""


@dataclass(frozen=True, kw_only=True)
class SandboxRecord:
    id: str
    tenant: str
    ephemeral: bool
    egress: str
    status: str
    created_at: datetime
    last_active_at: datetime

    @classmethod
    def of(cls, row: ServiceSandboxRow) -> SandboxRecord:
        return cls(
            id=row.id,
            tenant=row.tenant,
            ephemeral=row.ephemeral,
            egress=row.egress,
            status=row.status,
            created_at=row.created_at,
            last_active_at=row.last_active_at,
        )

    def to_json(self) -> dict[str, Any]:
        """n8n's shape: times in whole seconds since the epoch."""
        return {
            "id": self.id,
            "status": self.status,
            "created_at": int(self.created_at.timestamp()),
            "last_active_at": int(self.last_active_at.timestamp()),
            "ephemeral": self.ephemeral,
            "egress": self.egress,
        }


class ServiceSandboxes:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        sandboxes: SandboxService,
        *,
        npm_registry: str | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.sandboxes = sandboxes
        self.executions = Executions()
        self._npm_registry = npm_registry
        # The other replicas serve the executions they run (records and files are shared).
        self._replicas = replicas
        if replicas is not None:
            replicas.handle(ASK_EVENTS, self._events_asked)
            replicas.handle(ASK_KILL, self._kill_asked)
        self._touched: dict[str, datetime] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="sandbox-api-sweeper")

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.executions.close()

    # -- lifecycle ------------------------------------------------------------------------

    async def create(
        self, tenant: str, sandbox_id: str | None, *, ephemeral: bool, egress: str | None
    ) -> tuple[SandboxRecord, bool]:
        """The caller's sandbox `sandbox_id` (made when new), or a new one with a fresh id;
        True when it was made now."""
        if egress is not None and egress not in EGRESS_MODES:
            raise InvalidArgumentError(f"egress must be one of {', '.join(EGRESS_MODES)}")
        if sandbox_id is None:
            sandbox_id = str(uuid.uuid4())
        _check_id(sandbox_id)
        existing = await self._find(sandbox_id)
        if existing is not None:
            return self._reconnect(existing, tenant, egress), False
        now = datetime.now(UTC)
        row = ServiceSandboxRow(
            id=sandbox_id,
            tenant=tenant,
            ephemeral=ephemeral,
            egress=egress or "public",
            status="running",
            created_at=now,
            last_active_at=now,
        )
        # The record first: a janitor never takes a container whose record exists.
        try:
            async with self.db.session() as session, session.begin():
                session.add(row)
        except IntegrityError:  # made meanwhile by another request (or replica)
            found = await self._find(sandbox_id)
            if found is None:
                raise
            return self._reconnect(found, tenant, egress), False
        record = SandboxRecord.of(row)
        try:
            await self.sandboxes.for_service(sandbox_id).acquire(service_key(sandbox_id))
        except BaseException:
            await self._forget(sandbox_id)
            raise
        log.info("service sandbox created", sandbox=sandbox_id, tenant=tenant, ephemeral=ephemeral)
        return record, True

    @staticmethod
    def _reconnect(record: SandboxRecord, tenant: str, egress: str | None) -> SandboxRecord:
        if record.tenant != tenant:
            raise SandboxConflictError("the sandbox id belongs to another tenant")
        if egress is not None and egress != record.egress:
            raise SandboxConflictError(
                f"the sandbox exists with egress {record.egress!r}, not {egress!r}"
            )
        return record

    async def get(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        """The tenant's sandbox; another tenant's is as unknown as a missing one."""
        _check_id(sandbox_id)
        record = await self._find(sandbox_id)
        if record is None or record.tenant != tenant:
            raise NotFoundError("sandbox not found")
        return record

    async def all(self, tenant: str) -> list[SandboxRecord]:
        async with self.db.session() as session:
            rows = await session.scalars(
                select(ServiceSandboxRow)
                .where(ServiceSandboxRow.tenant == tenant)
                .order_by(ServiceSandboxRow.created_at.desc())
            )
            return [SandboxRecord.of(row) for row in rows]

    async def delete(self, tenant: str, sandbox_id: str) -> None:
        await self.get(tenant, sandbox_id)
        await self._remove(sandbox_id)

    async def _remove(self, sandbox_id: str) -> None:
        """The record goes first: a container left by an engine that is away now is then
        the janitor's once the engine is back. The sandbox goes before its executions are
        ended: its removal ends every command in it at once, where killing each one's tree
        first took a command in the sandbox apiece (32 running took ~40 s on a busy machine)."""
        await self._forget(sandbox_id)
        with contextlib.suppress(UnavailableError, SandboxError):
            await self.sandboxes.for_service(sandbox_id).destroy(service_key(sandbox_id))
        await self.executions.kill_all(sandbox_id)
        log.info("service sandbox deleted", sandbox=sandbox_id)

    async def _forget(self, sandbox_id: str) -> None:
        async with self.db.session() as session, session.begin():
            await session.execute(
                delete(ServiceSandboxRow).where(ServiceSandboxRow.id == sandbox_id)
            )
        self._touched.pop(sandbox_id, None)

    async def _find(self, sandbox_id: str) -> SandboxRecord | None:
        async with self.db.session() as session:
            row = await session.get(ServiceSandboxRow, sandbox_id)
            return SandboxRecord.of(row) if row is not None else None

    async def live(self, tenant: str, sandbox_id: str) -> SandboxManager:
        """The tenant's sandbox, running: woken when stopped, brought back when its container
        died (then SandboxRestartedError, once), its activity written down."""
        record = await self.get(tenant, sandbox_id)
        manager = self.sandboxes.for_service(sandbox_id)
        key = service_key(sandbox_id)
        state = await manager.state(key)
        crashed = record.status == "running" and state != "running"
        if state != "running":
            await manager.acquire(key)
        await self._touch(record, force=record.status != "running")
        if crashed:
            log.warning("service sandbox restarted after its container died", sandbox=sandbox_id)
            raise SandboxRestartedError(
                "sandbox restarted after its container died; state in memory was lost"
            )
        return manager

    async def _touch(self, record: SandboxRecord, *, force: bool = False) -> None:
        now = datetime.now(UTC)
        last = self._touched.get(record.id)
        if not force and last is not None and now - last < TOUCH_EVERY:
            return
        self._touched[record.id] = now
        async with self.db.session() as session, session.begin():
            await session.execute(
                update(ServiceSandboxRow)
                .where(ServiceSandboxRow.id == record.id)
                .values(status="running", last_active_at=now)
            )

    # -- commands and files ---------------------------------------------------------------

    async def exec(
        self,
        tenant: str,
        sandbox_id: str,
        *,
        command: str,
        env: dict[str, str],
        workdir: str,
        timeout_ms: int | None,
        exec_id: str | None,
    ) -> tuple[str, AsyncIterator[dict[str, Any]]]:
        """Start the command (`/bin/sh -c`), or follow the execution `exec_id` names when
        it is known (here or on another replica): its id and its events."""
        if not command.strip():
            raise InvalidArgumentError("command is required")
        timeout = DEFAULT_TIMEOUT_MS if timeout_ms is None or timeout_ms == 0 else timeout_ms
        if not 0 < timeout <= MAX_TIMEOUT_MS:
            raise InvalidArgumentError(
                f"timeout_ms must be between 1 and {MAX_TIMEOUT_MS} (30 minutes)"
            )
        if exec_id is not None and not 0 < len(exec_id) <= MAX_EXEC_ID_CHARS:
            raise InvalidArgumentError(f"exec_id is 1-{MAX_EXEC_ID_CHARS} characters")
        if exec_id is not None:
            with contextlib.suppress(NotFoundError):
                return exec_id, await self.follow(tenant, sandbox_id, exec_id)
        manager = await self.live(tenant, sandbox_id)
        # The kind's environment again: a container made before it changed keeps its own.
        environment = dict(SERVICE.environment)
        if self._npm_registry:
            environment["npm_config_registry"] = self._npm_registry
        environment |= env
        directory = posixpath.join(HOME_DIR, workdir) if workdir else HOME_DIR

        async def run(on_output: OutputCallback) -> Any:
            return await manager.run_command(
                service_key(sandbox_id),
                command,
                timeout_s=timeout / 1000,
                workdir=directory,
                env=environment,
                on_output=on_output,
            )

        execution = self.executions.start(sandbox_id, exec_id or str(uuid.uuid4()), run)
        return execution.exec_id, self.executions.follow(execution)

    async def follow(
        self, tenant: str, sandbox_id: str, exec_id: str, *, after: int = -1, follow: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """The execution's events after seq `after` (with `follow`, until it ends), from this
        process or the replica that runs it. NotFoundError or ExecutionGoneError (the first
        event may raise the latter) before anything is streamed."""
        await self.get(tenant, sandbox_id)
        local = self.executions.find(sandbox_id, exec_id)
        if local is not None:
            return self.executions.follow(local, after=after, follow=follow)
        first = await self._ask_events(sandbox_id, exec_id, after)
        return self._follow_remote(first, sandbox_id, exec_id, after, follow)

    async def kill(self, tenant: str, sandbox_id: str, exec_id: str) -> None:
        """Kill an execution (here, or on the replica that runs it); never wakes a sandbox (a
        stopped one has no process left)."""
        await self.get(tenant, sandbox_id)
        if self.executions.find(sandbox_id, exec_id) is not None or self._replicas is None:
            await self.executions.kill(sandbox_id, exec_id)
        else:
            await self._replicas.ask(ASK_KILL, {"sandbox": sandbox_id, "exec_id": exec_id})

    # -- executions on other replicas -----------------------------------------------------

    async def _events_asked(self, args: dict[str, Any]) -> dict[str, Any] | None:
        execution = self.executions.find(str(args["sandbox"]), str(args["exec_id"]))
        if execution is None:
            return None
        try:
            events, complete = execution.after(int(args["after"]), REPLY_BYTES)
        except ExecutionGoneError:
            return {"gone": True}
        return {"events": events, "complete": complete, "done": execution.done}

    async def _kill_asked(self, args: dict[str, Any]) -> bool:
        await self.executions.kill(str(args["sandbox"]), str(args["exec_id"]))
        return True

    async def _ask_events(self, sandbox_id: str, exec_id: str, after: int) -> dict[str, Any]:
        if self._replicas is not None:
            args = {"sandbox": sandbox_id, "exec_id": exec_id, "after": after}
            for answer in await self._replicas.ask(ASK_EVENTS, args):
                if isinstance(answer, dict) and answer.get("gone"):
                    raise ExecutionGoneError("execution history is no longer retained")
                if isinstance(answer, dict):
                    return answer
        raise NotFoundError("execution not found")

    async def _follow_remote(
        self, answer: dict[str, Any], sandbox_id: str, exec_id: str, after: int, follow: bool
    ) -> AsyncIterator[dict[str, Any]]:
        """Another replica's execution, asked for its next events until it ends (a replica
        that went away ends the stream without an exit: the client sees it unfinished)."""
        while True:
            for event in answer["events"]:
                after = event["seq"]
                yield event
            if answer["complete"] and (answer["done"] or not follow):
                return
            if answer["complete"]:
                await asyncio.sleep(REMOTE_POLL_S)
            try:
                answer = await self._ask_events(sandbox_id, exec_id, after)
            except (NotFoundError, ExecutionGoneError):
                return

    async def file_op(self, tenant: str, sandbox_id: str, op: str, **args: Any) -> Any:
        """One of fsapi.mjs's operations (fsRead, fsWrite, ...) in the sandbox, as its user."""
        manager = await self.live(tenant, sandbox_id)
        return await manager.operation(
            service_key(sandbox_id), op, maxBytes=self.settings.sandbox_api_max_file_bytes, **args
        )

    # -- idle ------------------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        # Often enough for the shortest window to be kept within a third of it.
        windows = [
            w
            for w in (
                self.settings.sandbox_api_idle_stop_seconds,
                self.settings.sandbox_api_idle_delete_seconds,
            )
            if w > 0
        ]
        interval = min([SWEEP_INTERVAL_S] + [max(0.5, w / 3) for w in windows])
        while True:
            await asyncio.sleep(interval)
            try:
                if self._replicas is None or self._replicas.is_leader:
                    await self.sweep()
            except (SandboxError, UnavailableError) as exc:
                log.warning("service sandbox sweep failed", error=str(exc))

    async def sweep(self, now: datetime | None = None) -> dict[str, list[str]]:
        """Stop (or, ephemeral, delete) sandboxes idle past the stop window; delete those
        idle past the delete window. A sandbox running a command is active."""
        now = now or datetime.now(UTC)
        stop_s = self.settings.sandbox_api_idle_stop_seconds
        delete_s = self.settings.sandbox_api_idle_delete_seconds
        stopped: list[str] = []
        deleted: list[str] = []
        async with self.db.session() as session:
            found = await session.scalars(select(ServiceSandboxRow))
            rows = [SandboxRecord.of(r) for r in found]
        for record in rows:
            if self.executions.running(record.id):
                continue
            idle = (now - record.last_active_at).total_seconds()
            if (delete_s and idle >= delete_s) or (record.ephemeral and stop_s and idle >= stop_s):
                await self._remove(record.id)
                deleted.append(record.id)
            elif stop_s and idle >= stop_s and record.status == "running":
                await self.stop(record.id)
                stopped.append(record.id)
        return {"stopped": stopped, "deleted": deleted}

    async def stop(self, sandbox_id: str) -> None:
        """Stop the sandbox (an idle stop): files kept, woken quietly by the next call."""
        # Recorded first: a request meanwhile then wakes it instead of taking it for a crash.
        async with self.db.session() as session, session.begin():
            await session.execute(
                update(ServiceSandboxRow)
                .where(ServiceSandboxRow.id == sandbox_id)
                .values(status="stopped")
            )
        with contextlib.suppress(UnavailableError, SandboxError):
            await self.sandboxes.for_service(sandbox_id).stop(service_key(sandbox_id))
        log.info("service sandbox stopped (idle)", sandbox=sandbox_id)


def _check_id(sandbox_id: str) -> None:
    if not SANDBOX_ID.fullmatch(sandbox_id):
        raise InvalidArgumentError("invalid sandbox id: a lowercase UUID is expected")


async def sandbox_egress(db: Database, key: str) -> str:
    """The egress mode of the service sandbox a manager key names (`none` for an unknown
    one), for the egress proxy: read from the record, which every replica shares."""
    sandbox_id = service_sandbox_id(key)
    if sandbox_id is None:
        return "none"
    async with db.session() as session:
        row = await session.get(ServiceSandboxRow, sandbox_id)
        return row.egress if row is not None else "none"
