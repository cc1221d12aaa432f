"""The `instance-ai` command: `serve`, and client commands that talk to a running server."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import grpc
import structlog
import typer
from grpc_health.v1 import health_pb2, health_pb2_grpc

from browser_relay.cli import browser_relay
from evals.cli import eval_command
from instance_ai.events import n8n_event
from instance_ai.metadata import RESUME_AFTER_KEY
from instance_ai.v1 import SERVICES, agent_pb2, agent_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from instance_ai_cli.build import (
    DEFAULT_THREAD,
    build,
    nodes_app,
    print_build,
    print_verification,
    upload_and_build,
    verify,
    verify_workflow,
)
from instance_ai_cli.chat import chat, tools_app
from instance_ai_cli.help_text import sentence_help
from instance_ai_cli.mcp import gateway, mcp
from instance_ai_cli.n8n import app as n8n_app
from instance_ai_cli.rekey import app as credentials_app
from instance_ai_cli.sandbox import app as sandbox_app
from instance_ai_cli.sandbox_api import app as sandbox_api_app
from instance_ai_client.connection import DEFAULT_SERVER, ClientConfig
from instance_ai_client.terminal import (
    EXIT_FAILURE,
    EXIT_USAGE,
    ApiKeyOption,
    JsonOption,
    ServerOption,
    TlsCaOption,
    err,
    out,
    print_json_line,
    run_client,
)
from n8n_bridge.cli import n8n_bridge
from server.errors import InstanceAIError
from server.logs import configure_logging
from server.settings import SettingsError, load_settings

if TYPE_CHECKING:
    from server.app import Application

__all__ = ["app", "events", "health", "serve"]

app = typer.Typer(
    name="instance-ai",
    help="Sandboxed build-and-verify service for AI-built n8n workflows.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(nodes_app, name="nodes")
app.add_typer(tools_app, name="tools")
app.add_typer(credentials_app, name="credentials")
app.add_typer(n8n_app, name="n8n")
app.add_typer(sandbox_api_app, name="sandbox-api")
app.command()(chat)
app.command()(build)
app.command()(verify)
app.command(name="eval")(eval_command)
app.command(name="browser-relay")(browser_relay)
app.command(name="n8n-bridge")(n8n_bridge)
app.command()(gateway)
app.command()(mcp)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="address to listen on [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="port to listen on [50051]")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="state directory")] = None,
    config: Annotated[Path | None, typer.Option(help="TOML config file")] = None,
    log_format: Annotated[str | None, typer.Option(help="console or json")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
    sandbox_api: Annotated[
        str | None,
        typer.Option(
            help="host:port to serve the sandbox service API on (what n8n's sandbox client "
            "speaks) [INSTANCE_AI_SANDBOX_API_ADDRESS; unset: off]"
        ),
    ] = None,
    build_example: Annotated[
        Path | None,
        typer.Option(
            help="once serving, build and verify this workflow source through the API and "
            "print the result"
        ),
    ] = None,
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
            sandbox_api_address=sandbox_api,
        )
    except SettingsError as exc:
        err.print(f"instance-ai: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    example = None
    if build_example is not None:
        try:
            example = (build_example.name, build_example.read_text())
        except (OSError, UnicodeDecodeError) as exc:
            err.print(f"instance-ai: cannot read {build_example}: {exc}", markup=False)
            raise typer.Exit(EXIT_USAGE) from None
    configure_logging(log_format=settings.log_format, level=settings.log_level)
    log = structlog.get_logger("instance_ai")
    # The whole server, imported only to serve: client commands and a bad setting's
    # usage error start in a fraction of the time.
    from server.app import Application

    try:
        asyncio.run(_serve(Application(settings), example))
    except InstanceAIError as exc:
        log.error("cannot start", error=str(exc))
        raise typer.Exit(EXIT_FAILURE) from None


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


async def _serve(application: Application, example: tuple[str, str] | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with application:
        if example is not None:
            await _build_example(application, example)
        await stop.wait()
        structlog.get_logger("instance_ai").info("shutdown requested")


async def _build_example(application: Application, example: tuple[str, str]) -> None:
    """Build and verify `example` through the server's own API, as any client would, and print
    the outcome and the claim. A failure is printed too; the server keeps serving either way."""
    settings = application.settings
    keys = settings.accepted_api_keys()
    host = "127.0.0.1" if _unspecified(settings.host) else settings.host
    client = ClientConfig(
        server=f"{host}:{application.port}",
        api_key=keys[0] if keys else None,
        tls_ca_file=settings.tls_cert_file,
    )
    try:
        name, source = example
        response = await upload_and_build(client, DEFAULT_THREAD, f"src/{name}", source, None)
    except grpc.aio.AioRpcError as exc:
        err.print(f"instance-ai: building {name} failed: {exc.details()}", markup=False)
        return
    print_build(response)
    if response.success:
        try:
            print_verification(
                await verify_workflow(client, DEFAULT_THREAD, response.workflow_id, {})
            )
        except grpc.aio.AioRpcError as exc:
            err.print(f"instance-ai: verifying {name} failed: {exc.details()}", markup=False)
    out.print(f"  (the events: instance-ai events {DEFAULT_THREAD})")


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
    report = run_client(_health(client, timeout), client)
    from server.api.server import RUNTIME_HEALTH_PREFIX  # the gRPC front: only here

    serving = report["status"] == "SERVING"
    if as_json:
        out.print_json(data=report)
    else:
        colour = "green" if serving else "red"
        out.print(f"{server}: [{colour}]{report['status']}[/]")
        for name, status in report["services"].items():
            out.print(f"  {name}: {status}")
            if name.startswith(RUNTIME_HEALTH_PREFIX) and status != "SERVING":
                out.print("    [yellow]no gVisor there: its sandboxes share the host's kernel[/]")
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
            return _status_name(response.status)

        overall = await check("")
        services = {name: await check(name) for name in SERVICES}
        try:  # everything the server reports on, e.g. each container engine
            listed = await stub.List(
                health_pb2.HealthListRequest(), timeout=deadline_s, metadata=client.metadata()
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
        else:
            for name, status in sorted(listed.statuses.items()):
                if name:
                    services.setdefault(name, _status_name(status.status))
    return {"server": client.server, "status": overall, "services": services}


def _status_name(status: int) -> str:
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(status))


@app.command(name="gateway-key")
def gateway_key(
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
) -> None:
    """A filesystem-gateway key for you (shown once; it replaces your last one), and the
    command that shares a folder with it."""
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)
    created = run_client(_gateway_key(client), client)
    if as_json:
        out.print_json(data=created)
    else:
        out.print(created["command"].replace(" --root DIR", " --root FOLDER"), markup=False)


async def _gateway_key(client: ClientConfig) -> dict[str, str]:
    async with client.channel() as channel:
        created = await gateway_pb2_grpc.GatewayStub(channel).CreateGatewayKey(
            gateway_pb2.CreateGatewayKeyRequest(), metadata=client.metadata()
        )
    return {"key": created.key, "serverUrl": created.server_url, "command": created.command}


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
            print_json_line(event)
        else:
            _print_event(event)

    run_client(_events(client, thread, after, follow, emit), client)
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
                    event = n8n_event(response.event)
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


def _print_event(event: dict[str, Any]) -> None:
    ident = f"#{event['id']}" if "id" in event else "live"
    run = f" [dim]{event['runId']}[/]" if event["runId"] else ""
    payload = json.dumps(event["payload"], separators=(",", ":"))
    at = datetime.fromtimestamp(event["ts"] / 1000, UTC).strftime("%H:%M:%S")
    out.print(f"[dim]{ident:>7}[/] {at} [bold]{event['type']}[/]{run} ", end="")
    out.print(payload, markup=False)


# Last, once every command is registered (here and in the mounted apps).
sentence_help(app)
