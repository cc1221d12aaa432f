"""`instance-ai build FILE` and `instance-ai nodes search QUERY`: client commands for the build
pipeline and the node catalog."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Annotated, Any

import typer
from google.protobuf import json_format

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import (
    pipeline_pb2,
    pipeline_pb2_grpc,
    tools_pb2,
    tools_pb2_grpc,
)
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
    run_client,
)

__all__ = [
    "DEFAULT_THREAD",
    "ThreadOption",
    "build",
    "nodes_app",
    "print_build",
    "print_verification",
    "search",
    "upload_and_build",
    "verify",
    "verify_workflow",
]

# Builds from the command line share one thread, so building a file again updates its workflow.
DEFAULT_THREAD = "cli"
ThreadOption = Annotated[str, typer.Option("--thread", help="thread whose workspace to use")]

nodes_app = typer.Typer(help="The node type catalog.")


def build(
    file: Annotated[Path, typer.Argument(help="a .workflow.ts or WorkflowJSON file")],
    thread: ThreadOption = DEFAULT_THREAD,
    workflow_id: Annotated[
        str | None, typer.Option("--workflow-id", help="bind the file to this workflow")
    ] = None,
    workspace_path: Annotated[
        str | None, typer.Option("--as", help="workspace path to upload to [src/FILE name]")
    ] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="then verify it and print the claim and previews")
    ] = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Upload FILE into the thread's workspace and build it: compile, validate, save."""
    try:
        source = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        err.print(f"instance-ai: cannot read {file}: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    target = workspace_path or posixpath.join("src", file.name)
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)
    response = run_client(upload_and_build(client, thread, target, source, workflow_id), client)
    # Every field, false and zero included: a script reads `success` whatever its value.
    result = json_format.MessageToDict(response, always_print_fields_with_no_presence=True)
    verified = None
    if verify and response.success:
        verified = run_client(verify_workflow(client, thread, response.workflow_id, {}), client)
    if as_json:
        out.print_json(data={**result, "verification": verified} if verify else result)
    else:
        print_build(response)
        if verified is not None:
            print_verification(verified)
    if not response.success or (verified is not None and not verified["success"]):
        raise typer.Exit(EXIT_FAILURE)


def verify(
    workflow_id: Annotated[str, typer.Argument(help="a built workflow's id")],
    thread: ThreadOption = DEFAULT_THREAD,
    input_data: Annotated[
        str | None, typer.Option("--input", help="JSON for the trigger, e.g. '{\"body\": {}}'")
    ] = None,
    trigger: Annotated[
        str | None, typer.Option("--trigger", help="verify one trigger (default: each)")
    ] = None,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Verify a built workflow: run it in the sandbox with side effects simulated, and print
    the claim the evidence supports and what each node produced."""
    arguments: dict[str, Any] = {}
    if input_data is not None:
        try:
            arguments["inputData"] = json.loads(input_data)
        except ValueError as exc:
            err.print(f"instance-ai: --input is not JSON: {exc}", markup=False)
            raise typer.Exit(EXIT_USAGE) from None
    if trigger:
        arguments["triggerNodeName"] = trigger
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)
    result = run_client(verify_workflow(client, thread, workflow_id, arguments), client)
    if as_json:
        out.print_json(data=result)
    else:
        print_verification(result)
    if not result["success"]:
        raise typer.Exit(EXIT_FAILURE)


async def verify_workflow(
    client: ClientConfig, thread: str, workflow_id: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    return await _call_tool(
        client, thread, "verify-built-workflow", {"workflowId": workflow_id, **arguments}
    )


def print_verification(result: dict[str, Any]) -> None:
    claim = (result.get("claim") or {}).get("level", "none")
    colour = {"verified": "green", "partial": "yellow", "unproven": "yellow"}.get(claim, "red")
    state = "passed" if result["success"] else "failed"
    out.print(f"[{colour}]verification {state}[/], claim [bold]{claim}[/] ({result['status']})")
    for preview in result.get("nodePreviews", []):
        mark = " (simulated)" if preview.get("simulated") else ""
        count = int(preview.get("itemCount", 0))
        out.print(
            f"  {preview['nodeName']}{mark}: {count} item(s) {preview['preview'][:100]}",
            markup=False,
        )
    if result.get("nodesNotReached"):
        out.print(f"  not reached: {', '.join(result['nodesNotReached'])}", markup=False)
    out.print(f"  → {result['guidance']}", markup=False)


async def upload_and_build(
    client: ClientConfig, thread: str, path: str, source: str, workflow_id: str | None
) -> pipeline_pb2.BuildWorkflowResponse:
    async with client.channel() as channel:
        # Through the tool, not Workspace.WriteFile: a tool call starts the thread if it is new.
        await tools_pb2_grpc.ToolsStub(channel).CallTool(
            tools_pb2.CallToolRequest(
                thread_id=thread,
                tool_name="workspace_write_file",
                arguments_json=to_json({"path": path, "content": source}),
            ),
            metadata=client.metadata(),
        )
        response: pipeline_pb2.BuildWorkflowResponse = await pipeline_pb2_grpc.PipelineStub(
            channel
        ).BuildWorkflow(
            pipeline_pb2.BuildWorkflowRequest(
                thread_id=thread, file_path=path, workflow_id=workflow_id or ""
            ),
            metadata=client.metadata(),
        )
        return response


def print_build(response: pipeline_pb2.BuildWorkflowResponse) -> None:
    if response.success:
        out.print(
            f"[green]built[/] {response.file_path} → workflow {response.workflow_id} "
            f"'{response.workflow_name}' (source {response.source_hash[:12]})"
        )
    else:
        out.print(f"[red]build failed[/] {response.file_path}")
    for label, issues in (("error", response.errors), ("warning", response.warnings)):
        for issue in issues:
            where = (
                f"{issue.file or response.file_path}:{issue.line}:{issue.column} "
                if issue.line
                else ""
            )
            node = f"[{issue.node_name}] " if issue.node_name else ""
            out.print(f"  {label} {where}({issue.source}) {node}{issue.message}", markup=False)
    if response.HasField("remediation") and not response.success:
        out.print(f"  → {response.remediation.guidance}", markup=False)


@nodes_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="a service name or alias, e.g. slack")],
    limit: Annotated[int, typer.Option(help="results at most")] = 10,
    thread: ThreadOption = DEFAULT_THREAD,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Search node types by service name or alias, most relevant first."""
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)
    result = run_client(
        _call_tool(client, thread, "search-nodes", {"query": query, "limit": limit}), client
    )
    if as_json:
        out.print_json(data=result)
        return
    for node in result["nodes"]:
        versions = ", ".join(f"{v:g}" for v in node["versions"])
        out.print(f"[bold]{node['name']}[/]  {node['displayName']} (v{versions})")
        out.print(f"    {node['description']}", markup=False)


async def _call_tool(
    client: ClientConfig, thread: str, tool: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    async with client.channel() as channel:
        response = await tools_pb2_grpc.ToolsStub(channel).CallTool(
            tools_pb2.CallToolRequest(
                thread_id=thread, tool_name=tool, arguments_json=to_json(arguments)
            ),
            metadata=client.metadata(),
        )
        return from_json(response.result_json)
