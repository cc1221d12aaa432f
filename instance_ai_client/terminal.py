"""What the client commands share (`instance-ai ...` and `instance-ai eval`): consoles, exit
codes, client options, JSON lines, and running a client call with errors a person can act on."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import grpc
import typer
from rich.console import Console

from instance_ai_client.connection import ClientConfig

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "ApiKeyOption",
    "JsonOption",
    "ServerOption",
    "TlsCaOption",
    "err",
    "out",
    "print_json_line",
    "run_client",
]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_FAILURE = 1
EXIT_USAGE = 2

ServerOption = Annotated[
    str, typer.Option("--server", envvar="INSTANCE_AI_SERVER", help="host:port of the server")
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option("--api-key", envvar="INSTANCE_AI_API_KEY", help="API key (Bearer token)"),
]
TlsCaOption = Annotated[
    Path | None,
    typer.Option("--tls-ca", envvar="INSTANCE_AI_TLS_CA", help="CA certificate: use TLS"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def print_json_line(document: dict[str, Any]) -> None:
    """One JSON document on a line of its own, flushed at once: a reader of a live stream (a
    pipe) gets each event when it happens, not when the buffer fills. Written to stdout, not
    through the rich console: that would read `[...]` in the values as markup."""
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


def run_client(coro: Any, client: ClientConfig) -> Any:
    try:
        return asyncio.run(coro)
    except grpc.aio.AioRpcError as exc:
        if exc.code() is grpc.StatusCode.UNAVAILABLE and "connect" in (exc.details() or ""):
            err.print(
                f"instance-ai: cannot reach {client.server}: {exc.details()}; is "
                "`instance-ai serve` running there (or pass --server)?",
                markup=False,
            )
        else:
            err.print(f"instance-ai: {exc.code().name}: {exc.details()}", markup=False)
        raise typer.Exit(EXIT_FAILURE) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
