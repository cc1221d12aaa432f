"""`instance-ai sandbox ...`: operator commands that talk to the Docker engine directly."""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from sandbox.docker_engine import DockerHost, connect
from sandbox.errors import SandboxError
from sandbox.image.build import ImageBuilder
from sandbox.kinds import SERVICE, THREAD, service_sandbox_id
from server.logs import configure_logging
from server.runtime.placements import Placements
from server.runtime.sandboxes import (
    connect_manager,
    docker_hosts,
    engine_name,
    sandbox_owner,
    service_keys,
)
from server.settings import Settings, SettingsError, load_settings
from server.store import Database
from server.store.models import ServiceSandboxRow
from server.store.threads import get_thread

__all__ = [
    "JsonOption",
    "app",
    "build_image",
    "command_line",
    "err",
    "exec_command",
    "garbage_collect",
    "list_sandboxes",
    "out",
]

app = typer.Typer(help="Per-thread sandboxes: build the image, list, clean up, run commands.")
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def _settings() -> Settings:
    try:
        settings = load_settings()
    except SettingsError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(2) from None
    # Only problems are worth a log line here (on stderr); stdout carries the result.
    configure_logging(log_format=settings.log_format, level="warning")
    return settings


async def _owner(settings: Settings) -> str:
    """The owner the service on these settings uses (read from its database by default)."""
    if settings.sandbox_owner:
        return settings.sandbox_owner
    db = await Database.open(settings.resolved_database_url)
    try:
        return await sandbox_owner(settings, db)
    finally:
        await db.close()


async def _service_keys(settings: Settings) -> dict[str, str]:
    """The sandbox API's sandboxes, by their containers' sandbox ids."""
    db = await Database.open(settings.resolved_database_url)
    try:
        return await service_keys(db)
    finally:
        await db.close()


async def _thread_engine(settings: Settings, thread: str) -> DockerHost | None:
    """The engine the thread's sandbox lives on (several engines: where it was placed)."""
    hosts = docker_hosts(settings)
    if len(hosts) < 2:
        return hosts[0]
    db = await Database.open(settings.resolved_database_url)
    try:
        placed = await Placements(db).engine_of(thread)
    finally:
        await db.close()
    if placed is None:
        raise _fail(SandboxError(f"thread {thread!r} has no sandbox on any engine yet"))
    return next((h for h in hosts if engine_name(h) == placed), hosts[0])


def _fail(exc: SandboxError) -> typer.Exit:
    err.print(f"instance-ai: {exc}", markup=False)
    return typer.Exit(1)


@app.command("build-image")
def build_image(
    cache_dir: Annotated[
        Path | None, typer.Option(help="npm tree and catalogs [DATA_DIR/sandbox]")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Build the sandbox image offline; a no-op when its content hash already exists."""
    settings = _settings()
    try:
        client = connect()
        builder = ImageBuilder(
            client,
            cache_dir=cache_dir or settings.data_dir / "sandbox",
            log=lambda message: err.print(message, markup=False),
        )
        built = builder.build()
        client.close()
    except SandboxError as exc:
        raise _fail(exc) from None
    report = {"image": built.tag, "built": built.built_layers}
    if as_json:
        out.print_json(data=report)
    else:
        built_now = ", ".join(built.built_layers)
        out.print(f"{built.tag} ({'built ' + built_now if built_now else 'up to date'})")


@app.command("ls")
def list_sandboxes(as_json: JsonOption = False) -> None:
    """List this service's sandboxes (by its owner label)."""
    settings = _settings()
    owner = asyncio.run(_owner(settings))
    keys = asyncio.run(_service_keys(settings))
    rows = []
    for host in docker_hosts(settings):
        try:
            manager = connect_manager(settings, owner=owner, host=host)
            sandboxes = manager.provider.list_sandboxes(every_kind=True)
            manager.engine.close()
        except SandboxError as exc:
            raise _fail(exc) from None
        rows += [
            {
                "thread": keys.get(s.sandbox_id, s.thread_id),
                "kind": s.kind,
                "sandbox": s.sandbox_id,
                "status": s.status,
                "created": s.created_at.isoformat() if s.created_at else None,
                "image": s.image,
                "runtime": s.runtime,
                "engine": engine_name(host),
            }
            for s in sandboxes
        ]
    if as_json:
        out.print_json(data={"owner": owner, "sandboxes": rows})
        return
    columns = ("thread", "kind", "sandbox", "status", "created", "image", "runtime", "engine")
    table = Table(*columns)
    for row in rows:
        table.add_row(*(str(row[k] or "") for k in columns))
    out.print(table)


@app.command("gc")
def garbage_collect(as_json: JsonOption = False) -> None:
    """Remove sandboxes of deleted threads, expired ones and orphaned workspaces, once."""
    settings = _settings()

    async def run() -> dict[str, Any]:
        db = await Database.open(settings.resolved_database_url)
        try:

            async def thread_exists(thread_id: str) -> bool:
                async with db.session() as session:
                    return await get_thread(session, thread_id) is not None

            async def service_sandbox_exists(key: str) -> bool:
                sandbox = service_sandbox_id(key)
                if sandbox is None:
                    return False
                async with db.session() as session:
                    return await session.get(ServiceSandboxRow, sandbox) is not None

            owner = await sandbox_owner(settings, db)
            removed: dict[str, list[str]] = {
                "removedSandboxes": [],
                "removedVolumes": [],
                "removedEgressDirs": [],
            }

            async def claimed_service_sandbox_exists(sid: str) -> bool:
                return sid in await service_keys(db)

            kinds = (
                (THREAD, {"thread_exists": thread_exists}),
                (
                    SERVICE,
                    {
                        "thread_exists": service_sandbox_exists,
                        "claimed_exists": claimed_service_sandbox_exists,
                    },
                ),
            )
            for host in docker_hosts(settings):
                for kind, predicates in kinds:
                    manager = await asyncio.to_thread(
                        connect_manager, settings, owner=owner, host=host, kind=kind, **predicates
                    )
                    report = await manager.janitor()
                    manager.engine.close()
                    removed["removedSandboxes"] += report.removed_sandboxes
                    removed["removedVolumes"] += report.removed_volumes
                    removed["removedEgressDirs"] += report.removed_egress_dirs
        finally:
            await db.close()
        return removed

    try:
        report = asyncio.run(run())
    except SandboxError as exc:
        raise _fail(exc) from None
    if as_json:
        out.print_json(data=report)
    else:
        out.print(
            f"removed {len(report['removedSandboxes'])} sandboxes, "
            f"{len(report['removedVolumes'])} orphaned workspaces"
        )


@app.command("exec")
def exec_command(
    thread: Annotated[
        str,
        typer.Argument(help="thread id, or sandbox-api/ID for a sandbox of the sandbox API"),
    ],
    command: Annotated[
        list[str],
        typer.Argument(
            help="after --: one argument is a shell command line (`-- 'make; echo $?'`); "
            "several are the program and its arguments, passed exactly (`-- sh -c 'echo hi'`)"
        ),
    ],
    timeout: Annotated[float | None, typer.Option(help="seconds [the setting, 300]")] = None,
) -> None:
    """Run a command in a thread's sandbox; print its output; exit with its exit code."""
    settings = _settings()

    def show(stream: str, data: bytes) -> None:
        target = sys.stdout if stream == "stdout" else sys.stderr
        target.buffer.write(data)
        target.flush()

    kind = SERVICE if service_sandbox_id(thread) is not None else THREAD

    async def run() -> int:
        # A one-off command has no use for a warm pool.
        manager = await asyncio.to_thread(
            connect_manager,
            settings.model_copy(update={"sandbox_pool_size": 0, "sandbox_api_pool_size": 0}),
            owner=await _owner(settings),
            host=await _thread_engine(settings, thread),
            reap_leftovers=False,  # the service's own commands may be running there
            kind=kind,
        )
        result = await manager.run_command(
            thread,
            command_line(command),
            timeout_s=timeout,
            workdir=kind.working_dir,
            env=dict(kind.environment),
            on_output=show,
        )
        if result.truncated:
            err.print(f"(output cut; the whole of it is in {result.full_output_path})")
        await manager.close()
        manager.engine.close()
        if result.timed_out:
            err.print(f"(timed out after {result.duration_ms} ms; the command's tree was killed)")
            return 124
        return result.exit_code

    try:
        code = asyncio.run(run())
    except SandboxError as exc:
        raise _fail(exc) from None
    raise typer.Exit(code)


def command_line(argv: list[str]) -> str:
    """The shell line that runs `argv`: a single argument is already one; several are each
    quoted, so nothing in them is split again or read as shell syntax."""
    return argv[0] if len(argv) == 1 else shlex.join(argv)
