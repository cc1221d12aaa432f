"""The `instance-ai` command: `serve`, and client commands that talk to a running server."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import grpc
import structlog
import typer
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rich.console import Console

from instance_ai.v1 import SERVICES, agent_pb2, agent_pb2_grpc
from server.api.convert import from_struct
from server.api.errors import RESUME_AFTER_KEY
from server.app import Application
from server.client import DEFAULT_SERVER, ClientConfig
from server.errors import InstanceAIError
from server.logs import configure_logging
from server.sandbox_cli import app as sandbox_app
from server.settings import SettingsError, load_settings

app = typer.Typer(
    name="instance-ai",
    help="Sandboxed build-and-verify service for AI-built n8n workflows.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(sandbox_app, name="sandbox")
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

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


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="address to listen on [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="port to listen on [50051]")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="state directory")] = None,
    config: Annotated[Path | None, typer.Option(help="TOML config file")] = None,
    log_format: Annotated[str | None, typer.Option(help="console or json")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
) -> None:
    """Run the gRPC server until SIGTERM or SIGINT, then drain in-flight calls."""
    try:
        settings = load_settings(
            config_file=config,
            host=host,
            port=port,
            data_dir=data_dir,
            log_format=log_format,
            log_level=log_level,
        )
    except SettingsError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    configure_logging(log_format=settings.log_format, level=settings.log_level)
    log = structlog.get_logger("instance_ai")
    try:
        asyncio.run(_serve(Application(settings)))
    except InstanceAIError as exc:
        log.error("cannot start", error=str(exc))
        raise typer.Exit(EXIT_FAILURE) from None


async def _serve(application: Application) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with application:
        await stop.wait()
        structlog.get_logger("instance_ai").info("shutdown requested")


@app.command()
def health(
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
    timeout: Annotated[float, typer.Option(help="seconds to wait for an answer")] = 5.0,
) -> None:
    """Ask the server's health service about the server and every instance_ai service."""
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)
    report = _run_client(_health(client, timeout), client)
    serving = report["status"] == "SERVING"
    if as_json:
        out.print_json(data=report)
    else:
        colour = "green" if serving else "red"
        out.print(f"{server}: [{colour}]{report['status']}[/]")
        for name, status in report["services"].items():
            out.print(f"  {name}: {status}")
    if not serving:
        raise typer.Exit(EXIT_FAILURE)


async def _health(client: ClientConfig, deadline_s: float) -> dict[str, Any]:
    async with client.channel() as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        async def check(service: str) -> str:
            response = await stub.Check(
                health_pb2.HealthCheckRequest(service=service),
                timeout=deadline_s,
                metadata=client.metadata(),
            )
            return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))

        overall = await check("")
        services = {name: await check(name) for name in SERVICES}
    return {"server": client.server, "status": overall, "services": services}


@app.command()
def events(
    thread: Annotated[str, typer.Argument(help="thread id")],
    after: Annotated[int, typer.Option(help="only events after this id")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stay live")] = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print a thread's events after a cursor; with --follow, keep printing live ones.

    With --json: one JSON document, or JSON lines with --follow."""
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)
    collected: list[dict[str, Any]] = []

    def emit(event: dict[str, Any]) -> None:
        if as_json and not follow:
            collected.append(event)
        elif as_json:
            sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()
        else:
            _print_event(event)

    _run_client(_events(client, thread, after, follow, emit), client)
    if as_json and not follow:
        out.print_json(data={"threadId": thread, "events": collected})


async def _events(client: ClientConfig, thread: str, after: int, follow: bool, emit: Any) -> None:
    cursor = after
    async with client.channel() as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        while True:
            request = agent_pb2.StreamEventsRequest(
                thread_id=thread, after=str(cursor) if cursor else "", follow=follow
            )
            call = stub.StreamEvents(request, metadata=client.metadata())
            try:
                async for response in call:
                    event = _event_dict(response.event)
                    cursor = event.get("id") or cursor
                    emit(event)
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.ABORTED:
                    raise
                # Fell behind the live stream: resume from the last event we printed.
                resume = dict(exc.trailing_metadata() or ()).get(RESUME_AFTER_KEY)
                cursor = int(resume) if resume else cursor
                err.print(f"[yellow]fell behind; resuming after event {cursor}[/]")


def _event_dict(event: Any) -> dict[str, Any]:
    return {
        "id": event.id if event.HasField("id") else None,
        "type": event.type,
        "threadId": event.thread_id,
        "runId": event.run_id or None,
        "agentId": event.agent_id or None,
        "ts": event.ts.ToDatetime().isoformat() + "Z",
        "payload": from_struct(event.payload),
    }


def _print_event(event: dict[str, Any]) -> None:
    ident = f"#{event['id']}" if event["id"] is not None else "live"
    run = f" [dim]{event['runId']}[/]" if event["runId"] else ""
    payload = json.dumps(event["payload"], separators=(",", ":"))
    out.print(f"[dim]{ident:>7}[/] {event['ts'][11:19]} [bold]{event['type']}[/]{run} ", end="")
    out.print(payload, markup=False)


def _run_client(coro: Any, client: ClientConfig) -> Any:
    try:
        return asyncio.run(coro)
    except grpc.aio.AioRpcError as exc:
        if exc.code() is grpc.StatusCode.UNAVAILABLE:
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
