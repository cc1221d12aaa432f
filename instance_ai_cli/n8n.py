"""`instance-ai n8n ...`: a local n8n beside the service, for trying the n8n instance backend
(`INSTANCE_AI_INSTANCE=n8n`) and for its tests."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from rich.console import Console

from instance_ai_cli import n8n_local
from instance_ai_client.connection import DEFAULT_SERVER, ClientConfig
from instance_ai_client.terminal import EXIT_USAGE, ApiKeyOption, ServerOption, TlsCaOption
from n8n_bridge.app import BridgeConfig, bridge_app
from n8n_bridge.cli import parse_listen
from server.logs import configure_logging

__all__ = ["app", "install", "start"]

app = typer.Typer(help="A local n8n: install it (cached by version) and start it.")
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)
CacheOption = Annotated[
    Path | None,
    typer.Option("--cache-dir", help="where installs are kept (default ~/.cache/instance-ai/n8n)"),
]


@app.command()
def install(cache_dir: CacheOption = None) -> None:
    """Install n8n and its Node 24 from the npm registry (seconds when cached)."""
    configure_logging(log_format="console", level="info")
    try:
        installed = n8n_local.install(cache_dir)
    except n8n_local.N8nSetupError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(1) from None
    out.print(f"n8n {n8n_local.N8N_VERSION} ready in {installed.root}")


@app.command()
def start(
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="n8n's home: its database, owner and API key")
    ] = Path(".n8n"),
    cache_dir: CacheOption = None,
    bridge: Annotated[
        str | None,
        typer.Option(
            "--bridge",
            help="HOST:PORT: serve n8n's editor there with the service's assistant behind its "
            "views (`instance-ai n8n-bridge` in front of this n8n; the service from --server)",
        ),
    ] = None,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
) -> None:
    """Start n8n on a free loopback port with an owner and an API key, print the settings
    that connect the service to it, and run until interrupted."""
    configure_logging(log_format="console", level="warning")
    try:
        listen = parse_listen(bridge) if bridge else None
    except ValueError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    try:
        running = n8n_local.start(n8n_local.install(cache_dir), state_dir.resolve())
    except n8n_local.N8nSetupError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(1) from None
    key_file = running.state_dir / "instance-ai-api-key"
    out.print(f"n8n is running at {running.url} (editor: {running.url}/, log: {running.log_path})")
    out.print(f"owner {running.owner_email}, password in {running.state_dir / 'instance-ai-owner'}")
    out.print("connect the service to it with:")
    out.print(
        f"  INSTANCE_AI_INSTANCE=n8n INSTANCE_AI_N8N_URL={running.url} "
        f"INSTANCE_AI_N8N_API_KEY_FILE={key_file} instance-ai serve"
    )
    if listen is not None:
        host, port = listen
        out.print(f"n8n's editor with the assistant: http://{host}:{port}/assistant")
        config = BridgeConfig(
            n8n_url=running.url,
            client=ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca),
        )
        try:  # uvicorn ends on SIGINT or SIGTERM
            uvicorn.run(bridge_app(config), host=host, port=port, log_level="warning")
        finally:
            running.stop()
        return
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        signal.sigwait(stops)
    finally:
        running.stop()
