"""The manager's housekeeping, run on a timer by the service (server/runtime/engines.py):

- **the idle sweep**: sandboxes nothing has used for `idle_ttl` are let go of: their cache
  entry dropped (the container stays), suspended where the engine has snapshots (no CPU, no
  memory until the next use restores them), destroyed in ephemeral mode; never one the
  `is_busy` callback says has an active or suspended run or a running background task, nor one
  running a command;
- **the reaper** (at start-up): commands left running by a process that died are killed;
- **the janitor** (one replica for all): sandboxes of threads that no longer exist, sandboxes
  older than `max_age`, sandboxes a dead process left half made into a template, workspace
  volumes left without a container and egress directories no container names are removed,
  by owner label.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog

from sandbox.blocking import in_thread
from sandbox.engine import Snapshots
from sandbox.errors import SandboxError
from sandbox.provider import SandboxInfo

if TYPE_CHECKING:
    from sandbox.manager import SandboxManager

__all__ = ["JanitorReport", "janitor", "reap_all", "sweep_idle"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class JanitorReport:
    removed_sandboxes: list[str] = field(default_factory=list)
    removed_volumes: list[str] = field(default_factory=list)
    removed_egress_dirs: list[str] = field(default_factory=list)


async def sweep_idle(manager: SandboxManager) -> list[str]:
    """Let go of idle sandboxes that nothing is using; the thread ids swept."""
    now = time.monotonic()
    swept = []
    for thread_id, entry in list(manager.entries.items()):
        idle = now - entry.last_used >= manager.idle_ttl.total_seconds()
        if not idle or entry.running_commands or await manager.is_busy(thread_id):
            continue
        if manager.ephemeral:
            await manager.destroy(thread_id)
        elif isinstance(manager.engine, Snapshots) and manager.use_worker:
            await manager.stop(thread_id)
        else:
            manager.entries.pop(thread_id).drop_worker()
        swept.append(thread_id)
    return swept


async def reap_all(manager: SandboxManager) -> dict[str, list[int]]:
    """Kill commands left running by a process that died, in every running sandbox of the
    owner that this process has not taken up yet (start-up: their deadlines died with the
    process that enforced them). Thread id → job uids that had processes."""
    reaped: dict[str, list[int]] = {}
    for info in await in_thread(manager.provider.list_sandboxes):
        if info.status != "running" or info.thread_id in manager.entries:
            continue
        try:
            killed = await in_thread(manager.runner.kill_leftovers, info.container_id)
        except SandboxError as exc:  # removed meanwhile, or the engine went away
            log.warning("could not clear a sandbox", sandbox=info.sandbox_id, error=str(exc))
            continue
        if killed:
            reaped[info.thread_id or info.sandbox_id] = killed
    if reaped:
        log.warning("killed commands left running by a stopped process", sandboxes=reaped)
    return reaped


async def janitor(manager: SandboxManager) -> JanitorReport:
    """One pass: remove sandboxes of vanished threads, expired sandboxes, orphaned workspace
    volumes of the owner and egress directories no container names."""
    provider = manager.provider
    report = JanitorReport()
    for info in await in_thread(provider.list_sandboxes):
        if await _should_remove(manager, info):
            entry = manager.entries.pop(info.thread_id, None) if info.thread_id else None
            if entry is not None:
                entry.drop_worker()
            await in_thread(provider.remove, info)
            report.removed_sandboxes.append(info.thread_id or info.sandbox_id)
    for info in await in_thread(provider.stale_template_sources):
        await in_thread(provider.remove, info)
        report.removed_sandboxes.append(info.sandbox_id)
    for volume in await in_thread(provider.orphan_volumes):
        await in_thread(provider.remove_volume, volume)
        report.removed_volumes.append(volume)
    report.removed_egress_dirs.extend(await in_thread(provider.orphan_egress_dirs))
    await in_thread(provider.remove_egress_dirs, report.removed_egress_dirs)
    if report.removed_sandboxes or report.removed_volumes or report.removed_egress_dirs:
        log.info("sandbox janitor", **report.__dict__)
    return report


async def _should_remove(manager: SandboxManager, info: SandboxInfo) -> bool:
    entry = manager.entries.get(info.thread_id)
    if entry is not None and entry.running_commands:
        return False
    # A claimed pool sandbox has no thread label (labels are fixed at creation): its name's
    # sandbox id is asked about instead, where the owner of ids can answer.
    if info.thread_id and not await manager.thread_exists(info.thread_id):
        return True
    claimed_exists = manager.claimed_exists
    if not info.thread_id and claimed_exists and not await claimed_exists(info.sandbox_id):
        return True
    if manager.max_age is None or info.created_at is None:
        return False
    expired = datetime.now(UTC) - info.created_at > manager.max_age
    return expired and not await manager.is_busy(info.thread_id)
