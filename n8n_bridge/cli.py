"""`instance-ai n8n-bridge`: listen in front of a user's n8n, serving its editor's assistant
routes from the service (`--server`, as every client command) and passing the rest to n8n."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from instance_ai_client.connection import ClientConfig
from instance_ai_client.terminal import (
    EXIT_USAGE,
    ApiKeyOption,
    ServerOption,
    TlsCaOption,
    err,
    out,
)
from n8n_bridge.app import BridgeConfig, bridge_app

__all__ = ["n8n_bridge", "parse_listen", "read_user_keys"]


def n8n_bridge(
    n8n_url: Annotated[
        str, typer.Option("--n8n-url", envvar="INSTANCE_AI_N8N_URL", help="the n8n to front")
    ],
    listen: Annotated[
        str, typer.Option("--listen", help="HOST:PORT the editor is opened at")
    ] = "127.0.0.1:5680",
    user_keys: Annotated[
        Path | None,
        typer.Option(
            "--user-keys",
            envvar="INSTANCE_AI_BRIDGE_USER_KEYS",
            help="a JSON file of n8n user id or e-mail → that user's n8n API key, so what the "
            "assistant builds for them lands with their rights",
        ),
    ] = None,
    server: ServerOption = "127.0.0.1:50051",
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
) -> None:
    """Serve n8n's editor with the assistant behind it: open http://HOST:PORT/assistant."""
    try:
        host, port = parse_listen(listen)
        keys = read_user_keys(user_keys)
    except ValueError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    config = BridgeConfig(
        n8n_url=n8n_url.rstrip("/"),
        client=ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca),
        user_keys=keys,
    )
    out.print(f"n8n's editor with the assistant: http://{host}:{port}/assistant", markup=False)
    uvicorn.run(bridge_app(config), host=host, port=port, log_level="warning")


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {listen!r}: give HOST:PORT, e.g. 127.0.0.1:5680")
    return host.strip("[]"), int(port)


def read_user_keys(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        keys = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--user-keys {path}: {exc}") from None
    if not isinstance(keys, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in keys.items()
    ):
        raise ValueError(f"--user-keys {path}: expected a JSON object of user → API key")
    return keys
