"""`instance-ai sandbox-api key create|ls|revoke`: the keys (tenants) of the sandbox service
API, kept in the service's database. A new key is shown once, alone on the last line."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from rich.table import Table

from instance_ai_client.terminal import EXIT_FAILURE, EXIT_USAGE, JsonOption, err, out
from server.errors import InstanceAIError
from server.runtime.sandbox_api_keys import SandboxApiKeys
from server.settings import SettingsError, load_settings
from server.store import Database

__all__ = ["app"]

T = TypeVar("T")

app = typer.Typer(help="The sandbox service API (n8n's sandbox provider).", no_args_is_help=True)
key_app = typer.Typer(help="Its keys: each key is a tenant.", no_args_is_help=True)
app.add_typer(key_app, name="key")

NameArgument = Annotated[str, typer.Argument(help="the key's name (its tenant)")]


def _with_keys(work: Callable[[SandboxApiKeys], Awaitable[T]]) -> T:
    try:
        settings = load_settings()
    except SettingsError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None

    async def run() -> T:
        db = await Database.open(settings.resolved_database_url)
        try:
            return await work(SandboxApiKeys(db))
        finally:
            await db.close()

    try:
        return asyncio.run(run())
    except InstanceAIError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(EXIT_FAILURE) from None


@key_app.command("create")
def create(name: NameArgument) -> None:
    """Make a key for the tenant NAME; print it once (the last line is the key alone)."""
    key = _with_keys(lambda keys: keys.create(name))
    err.print(f"made the sandbox API key {name!r}; it is shown once, keep it:")
    out.print(key, markup=False, highlight=False, soft_wrap=True)


@key_app.command("ls")
def list_keys(as_json: JsonOption = False) -> None:
    """List the keys made with `key create` (names and dates; never the keys)."""
    found = _with_keys(lambda keys: keys.list())
    rows = [{"name": k.name, "created": k.created_at.isoformat()} for k in found]
    if as_json:
        out.print_json(data={"keys": rows})
        return
    table = Table("name", "created")
    for row in rows:
        table.add_row(row["name"], row["created"])
    out.print(table)


@key_app.command("revoke")
def revoke(name: NameArgument) -> None:
    """Revoke the key NAME: refused from the next request on (its sandboxes stay)."""
    if not _with_keys(lambda keys: keys.revoke(name)):
        err.print(f"instance-ai: no sandbox API key named {name!r}", markup=False)
        raise typer.Exit(EXIT_FAILURE)
    out.print(f"revoked the sandbox API key {name!r}")
