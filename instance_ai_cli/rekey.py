"""`instance-ai credentials rekey`: seal every stored credential again with the current key
(run after changing INSTANCE_AI_CREDENTIALS_KEY, with the old key in
INSTANCE_AI_CREDENTIALS_PREVIOUS_KEYS; afterwards the old key can go)."""

from __future__ import annotations

import asyncio

import typer

from instance_ai_client.terminal import EXIT_USAGE, err, out
from server.settings import Settings, SettingsError, load_settings

__all__ = ["app", "rekey"]

app = typer.Typer(help="Stored credentials (sealed at rest).", no_args_is_help=True)


@app.command()
def rekey() -> None:
    """Re-seal every credential with the current key; prints how many changed."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    changed = asyncio.run(_rekey(settings))
    out.print(f"re-sealed {changed} credential(s) with the current key")


async def _rekey(settings: Settings) -> int:
    # The store and the wiring load only for this command, not for every `instance-ai` start.
    from server.store import Database
    from server.wiring import credential_store

    db = await Database.open(settings.resolved_database_url)
    try:
        return await credential_store(settings, db).rekey()
    finally:
        await db.close()
