"""`instance-ai chat` (a conversation turn in the terminal, confirmation cards answered at the
prompt) and `instance-ai tools list|call` (the tool registry, directly)."""

from __future__ import annotations

import asyncio
import json
import mimetypes
from pathlib import Path
from typing import Annotated, Any

import grpc
import typer

from instance_ai.events import n8n_event
from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import agent_pb2, agent_pb2_grpc, tools_pb2, tools_pb2_grpc
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

__all__ = ["DEFAULT_CHAT_THREAD", "ThreadOption", "call_tool", "chat", "list_tools", "tools_app"]

DEFAULT_CHAT_THREAD = "cli-chat"
ThreadOption = Annotated[str, typer.Option("--thread", help="conversation thread id")]

tools_app = typer.Typer(help="List the agent's tools or call one directly.", no_args_is_help=True)


def chat(
    message: Annotated[str, typer.Argument(help="what to ask the assistant")],
    thread: ThreadOption = DEFAULT_CHAT_THREAD,
    yes: Annotated[bool, typer.Option("--yes", help="approve every card without asking")] = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
    attach: Annotated[
        list[Path] | None,
        typer.Option(
            "--attach",
            exists=True,
            dir_okay=False,
            readable=True,
            help="a file to attach (repeatable); the agent reads it with parse-file",
        ),
    ] = None,
) -> None:
    """Send a message and show the run as it happens: text, tool calls, checklists and
    confirmation cards (answered at the prompt, or approved with --yes). Ends with the run."""
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)
    files = [
        agent_pb2.Attachment(
            name=path.name,
            mime_type=mimetypes.guess_type(path.name)[0] or "",
            data=path.read_bytes(),
        )
        for path in attach or []
    ]
    status = run_client(
        _Chat(client, thread, yes=yes, as_json=as_json).turn(message, files), client
    )
    if status != "completed":
        raise typer.Exit(EXIT_FAILURE)


class _Chat:
    def __init__(self, client: ClientConfig, thread: str, *, yes: bool, as_json: bool) -> None:
        self.client = client
        self.thread = thread
        self.yes = yes
        self.as_json = as_json
        self.streamed: set[str] = set()
        self.tool_names: dict[str, str] = {}

    async def turn(self, message: str, files: list[agent_pb2.Attachment]) -> str:
        async with self.client.channel() as channel:
            stub = agent_pb2_grpc.AgentStub(channel)
            metadata = self.client.metadata()
            cursor = await self._last_event(stub)
            sent = await stub.SendMessage(
                agent_pb2.SendMessageRequest(
                    thread_id=self.thread, message=message, attachments=files
                ),
                metadata=metadata,
            )
            request = agent_pb2.StreamEventsRequest(
                thread_id=self.thread, after=str(cursor) if cursor else "", follow=True
            )
            call = stub.StreamEvents(request, metadata=metadata)
            async for response in call:
                # The shape `instance-ai events --json` prints: n8n's event contract.
                event = n8n_event(response.event)
                payload = event["payload"]
                if self.as_json:
                    print_json_line(event)
                else:
                    self._show(event["type"], payload)
                if event["type"] == "confirmation-request":
                    await self._answer(stub, payload)
                if event["type"] == "run-finish" and event["runId"] == sent.run_id:
                    call.cancel()
                    return str(payload.get("status", ""))
        return "unknown"

    async def _last_event(self, stub: agent_pb2_grpc.AgentStub) -> int:
        try:
            status = await stub.GetThreadStatus(
                agent_pb2.GetThreadStatusRequest(thread_id=self.thread),
                metadata=self.client.metadata(),
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                return 0  # a new thread
            raise
        return int(status.last_event_id)

    def _show(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "text-delta":
            self.streamed.add(str(payload.get("responseId", "")))
            out.print(payload.get("text", ""), end="", markup=False)
        elif kind == "text-block":
            if payload.get("responseId") in self.streamed:
                out.print()
            else:
                out.print(payload.get("text", ""), markup=False)
        elif kind == "tool-call":
            self.tool_names[payload["toolCallId"]] = payload["toolName"]
            args = json.dumps(payload.get("args", {}), separators=(",", ":"))
            out.print(f"[cyan]→ {payload['toolName']}[/] ", end="")
            out.print(_short(args), markup=False)
        elif kind == "tool-result":
            name = self.tool_names.get(payload["toolCallId"], "tool")
            result = json.dumps(payload.get("result", {}), separators=(",", ":"))
            out.print(f"[green]✓ {name}[/] ", end="")
            out.print(_short(result), markup=False)
        elif kind in ("tool-error", "tool-interrupted"):
            name = self.tool_names.get(payload["toolCallId"], "tool")
            out.print(f"[red]✗ {name}:[/] ", end="")
            out.print(str(payload.get("error", "")), markup=False)
        elif kind == "tasks-update":
            for item in payload.get("tasks", {}).get("tasks", []):
                out.print(
                    f"  [{_MARK.get(item['status'], ' ')}] {item['description']}", markup=False
                )
        elif kind in ("agent-spawned", "agent-completed"):
            out.print(f"[magenta]{kind}[/] {payload.get('role', '')} {payload.get('status', '')}")
        elif kind == "error":
            out.print("[red]error:[/] ", end="")
            out.print(str(payload.get("content", "")), markup=False)
        elif kind == "run-finish":
            reason = f" ({payload['reason']})" if payload.get("reason") else ""
            out.print(f"[bold]run {payload.get('status')}{reason}[/]")

    async def _answer(self, stub: agent_pb2_grpc.AgentStub, card: dict[str, Any]) -> None:
        resume = {"kind": "approval", "approved": True} if self.yes else await self._ask(card)
        await stub.Confirm(
            agent_pb2.ConfirmRequest(
                thread_id=self.thread, request_id=card["requestId"], resume_json=to_json(resume)
            ),
            metadata=self.client.metadata(),
        )

    async def _ask(self, card: dict[str, Any]) -> dict[str, Any]:
        """Show the card and read the answer typed at the prompt."""
        out.print(f"\n[bold yellow]┌ {card.get('message', 'Confirmation needed')}[/]")
        kind = card.get("inputType", "approval")
        if kind == "questions":
            return await _ask_questions(card.get("questions", []))
        if kind == "plan-review":
            return await _ask_plan(card.get("tasks", []))
        if kind == "text":
            return {"kind": "approval", "approved": True, "userInput": await _prompt("│ > ")}
        if "domainAccess" in card:
            return await _ask_domain(card["domainAccess"])
        if "credentialRequests" in card:
            return await _ask_credentials(card["credentialRequests"])
        if "setupRequests" in card:
            return _skip_setup(card["setupRequests"])
        out.print(f"│ {card.get('toolName', '')} {json.dumps(card.get('args', {}))}", markup=False)
        reply = (await _prompt("│ allow? yes (y) / always in this thread (a) / no (n): ")).lower()
        if reply in ("a", "always"):
            return {"kind": "approval", "approved": True, "scope": "session"}
        return {"kind": "approval", "approved": reply in ("y", "yes")}


async def _ask_questions(questions: list[dict[str, Any]]) -> dict[str, Any]:
    answers = []
    for question in questions:
        options = question.get("options") or []
        hint = f" ({' / '.join(options)})" if options else ""
        reply = await _prompt(f"│ {question['question']}{hint}: ")
        picked = [o.strip() for o in reply.split(",") if o.strip() in options]
        answers.append(
            {"questionId": question["id"], "selectedOptions": picked}
            | ({} if picked else {"customText": reply})
        )
    return {"kind": "questions", "answers": answers}


async def _ask_plan(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    for task in tasks:
        out.print(f"│ • {task['description']}", markup=False)
    reply = await _prompt("│ approve (y), deny (n), or type the changes you want: ")
    if reply.lower() in ("y", "yes"):
        return {"kind": "approval", "approved": True}
    if reply.lower() in ("n", "no", ""):
        return {"kind": "planDeny"}
    return {"kind": "approval", "approved": False, "userInput": reply}


def _skip_setup(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """Node setup needs the editor's forms; the terminal lists it and skips."""
    for request in requests:
        needs = [
            *request.get("credentialTypes", []),
            *(p["path"] for p in request.get("parameters", [])),
        ]
        out.print(f"│ {request['nodeName']}: needs {', '.join(needs)}", markup=False)
    out.print("│ (set these up in the n8n editor; skipped here)", markup=False)
    return {"kind": "setupWorkflowApply", "skippedNodes": [r["nodeName"] for r in requests]}


async def _ask_domain(access: dict[str, Any]) -> dict[str, Any]:
    out.print(f"│ {access.get('url', '')}", markup=False)
    reply = (
        await _prompt("│ fetch from this host? once (y) / this domain (d) / any (a) / no (n): ")
    ).lower()
    choices = {"y": "allow_once", "d": "allow_domain", "a": "allow_all"}
    if reply in choices:
        return {"kind": "domainAccessApprove", "domainAccessAction": choices[reply]}
    return {"kind": "domainAccessDeny"}


async def _ask_credentials(requests: list[dict[str, Any]]) -> dict[str, Any]:
    chosen: dict[str, str] = {}
    for request in requests:
        kind = request["credentialType"]
        existing = request.get("existingCredentials") or []
        for index, credential in enumerate(existing, 1):
            out.print(f"│ {index}. {credential['name']} ({credential['id']})", markup=False)
        if not existing:
            out.print(f"│ no {kind} credential yet: create one, then try again", markup=False)
            continue
        reply = await _prompt(f"│ which {kind}? number, or empty to skip: ")
        if reply.isdigit() and 1 <= int(reply) <= len(existing):
            chosen[kind] = existing[int(reply) - 1]["id"]
    if not chosen:
        return {"kind": "approval", "approved": False}
    return {"kind": "credentialSelection", "credentials": chosen}


_MARK = {"done": "x", "in_progress": "~", "failed": "!", "cancelled": "-"}


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


async def _prompt(question: str) -> str:
    return (await asyncio.to_thread(input, question)).strip()


@tools_app.command("list")
def list_tools(
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every tool with its group and the input schema sent to the model provider; conditional
    tools say what they need and whether this server registers them."""
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)

    async def fetch() -> tools_pb2.ListToolsResponse:
        async with client.channel() as channel:
            listed: tools_pb2.ListToolsResponse = await tools_pb2_grpc.ToolsStub(channel).ListTools(
                tools_pb2.ListToolsRequest(include_unavailable=True), metadata=client.metadata()
            )
            return listed

    listed = run_client(fetch(), client)
    tools = [
        {
            "name": t.name,
            "description": t.description,
            "group": t.group,
            "inputSchema": from_json(t.input_schema_json),
        }
        | ({"hitlAction": t.hitl_action} if t.hitl_action else {})
        | {"registered": t.available}
        | ({"requires": t.requires} if t.requires else {})
        for t in listed.tools
    ]
    if as_json:
        out.print_json(data={"tools": tools})
        return
    for tool in tools:
        gate = f" [yellow](needs approval: {tool['hitlAction']})[/]" if "hitlAction" in tool else ""
        if not tool["registered"]:
            gate += f" [red](not registered: needs {tool['requires']})[/]"
        elif "requires" in tool:
            gate += f" [dim](conditional: registered, {tool['requires']})[/]"
        out.print(f"[bold]{tool['name']}[/] [dim]{tool['group']}[/]{gate}")
        out.print(f"  {tool['description']}", markup=False)


@tools_app.command("call")
def call_tool(
    name: Annotated[str, typer.Argument(help="tool name, e.g. list-workflows")],
    args: Annotated[str, typer.Option("--args", help="arguments as a JSON object")] = "{}",
    thread: ThreadOption = DEFAULT_CHAT_THREAD,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
    tls_ca: TlsCaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Call one tool in a thread, with the same validation and permission rules as the agent."""
    try:
        arguments = json.loads(args)
    except json.JSONDecodeError as exc:
        err.print(f"instance-ai: --args is not JSON: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from None
    if not isinstance(arguments, dict):
        err.print("instance-ai: --args must be a JSON object", markup=False)
        raise typer.Exit(EXIT_USAGE)
    client = ClientConfig(server=server, api_key=api_key, tls_ca_file=tls_ca)

    async def call() -> tools_pb2.CallToolResponse:
        async with client.channel() as channel:
            response: tools_pb2.CallToolResponse = await tools_pb2_grpc.ToolsStub(channel).CallTool(
                tools_pb2.CallToolRequest(
                    thread_id=thread, tool_name=name, arguments_json=to_json(arguments)
                ),
                metadata=client.metadata(),
            )
            return response

    response = run_client(call(), client)
    result = from_json(response.result_json)
    if as_json:
        out.print_json(data={"result": result, "isError": response.is_error})
    else:
        out.print_json(data=result)
    if response.is_error:
        raise typer.Exit(EXIT_FAILURE)
