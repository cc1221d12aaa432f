"""The agent with real sandboxes: a scripted conversation that writes, builds, verifies and
reports a workflow; large results kept in the workspace; a server killed mid-tool."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from instance_ai.v1 import agent_pb2
from server.settings import Settings
from tests.agent_fixtures import Chat, last_tool_results, model, model_env, of_type, with_model
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.sandbox_fixtures import docker_env
from tests.test_cli import start_server, stop_server

__all__ = ["model"]  # fixtures, shared

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "order-intake.workflow.ts"
SOURCE = "src/order-intake.workflow.ts"


def result_of(request: dict[str, Any]) -> dict[str, Any]:
    results = last_tool_results(request)
    assert len(results) == 1 and not results[0].get("is_error"), results
    return dict(json.loads(results[0]["content"]))


async def test_a_scripted_conversation_writes_builds_verifies_and_reports(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    source = await asyncio.to_thread(EXAMPLE.read_text)
    built: dict[str, Any] = {}

    def after_build(request: dict[str, Any]) -> Turn:
        built.update(result_of(request))
        assert built["success"], built
        return tool(
            "verify-built-workflow",
            {"workflowId": built["workflowId"], "workItemId": built["workItemId"]},
        )

    def after_verify(request: dict[str, Any]) -> Turn:
        verified = result_of(request)
        verdict = "verified" if verified["success"] else "needs_patch"
        return tool(
            "report-verification-verdict",
            {
                "workItemId": built["workItemId"],
                "workflowId": built["workflowId"],
                "verdict": verdict,
                "workflowInspection": "Webhook → Set → If; Slack simulated.",
            },
        )

    steps: list[Callable[[dict[str, Any]], Turn]] = [
        lambda _r: tool(
            "workspace_write_file", {"path": SOURCE, "content": source}, say="Writing it."
        ),
        lambda r: (result_of(r), tool("build-workflow", {"filePath": SOURCE}))[1],
        after_build,
        after_verify,
        lambda r: text(f"Done. Guidance: {result_of(r)['guidance'][:60]}"),
    ]
    model.responder = lambda request: steps.pop(0)(request)
    async with serving(make_docker_settings(**with_model(model))) as (app, channel):
        chat = Chat(channel)
        run_id = await chat.send("build", "Build an order intake workflow and verify it")
        events = await chat.finished("build", run_id, within=240)
        saved = await app.parts.instance.workflows.get(built["workflowId"])
    assert of_type(events, "run-finish")[-1] == {"status": "completed"}, of_type(events, "error")
    calls = [c["toolName"] for c in of_type(events, "tool-call")]
    assert calls == [
        "workspace_write_file",
        "build-workflow",
        "verify-built-workflow",
        "report-verification-verdict",
    ]
    assert len(of_type(events, "tool-result")) == 4 and not of_type(events, "tool-error")
    assert saved is not None and saved.name == "Order intake"
    assert of_type(events, "text-block")[-1]["text"].startswith("Done. Guidance:")
    assert model.rejected == [] and not steps


async def test_a_large_tool_result_is_kept_in_the_workspace_and_paged(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    big = "\n".join(f"line {n}: " + "x" * 60 for n in range(400))
    model.script(
        tool("workspace_write_file", {"path": "notes.txt", "content": big}),
        tool("workspace_read_file", {"path": "notes.txt"}),
    )
    pointer: dict[str, Any] = {}

    def read_it(request: dict[str, Any]) -> Turn | None:
        if len(model.requests) != 3:
            return None
        pointer.update(json.loads(last_tool_results(request)[0]["content"]))
        return tool("workspace_read_tool_result", pointer["requiredAction"]["input"])

    model.responder = read_it
    model.script(text("read it"))
    settings = make_docker_settings(**with_model(model, agent_tool_result_max_tokens=1000))
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("big", "read the notes")
        events = await chat.finished("big", run_id, within=120)
    assert of_type(events, "run-finish")[-1] == {"status": "completed"}
    assert pointer["_offloaded"] is True and pointer["path"].startswith(".tool-results/")
    assert pointer["chars"] > len(big)
    described = json.loads(
        json.loads(last_tool_results(model.requests[3])[0]["content"])["content"]
    )
    assert described["chars"] == pointer["chars"] and described["json"]["type"] == "object"


async def test_a_server_killed_during_a_tool_call_leaves_an_interrupted_run(
    tmp_path: Path,
    make_docker_settings: Callable[..., Settings],
    model: FakeMessagesAPI,
    owner: str,
) -> None:
    model.script(tool("workspace_execute_command", {"command": "sleep 120"}))
    data_dir = tmp_path / "data"
    env = docker_env(owner) | model_env(model)
    server = await asyncio.to_thread(start_server, data_dir, env=env)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            chat = Chat(channel)
            run_id = await chat.send("crash", "run a long command")
            events = await chat.until("crash", lambda e: e["type"] == "tool-call", within=120)
            call_id = of_type(events, "tool-call")[-1]["toolCallId"]
    finally:
        stop_server(server)  # SIGKILL: no chance to clean up
    model.script(text("The last command was interrupted; shall I retry?"))
    async with serving(make_docker_settings(data_dir=data_dir, **with_model(model))) as (
        _app,
        channel,
    ):
        chat = Chat(channel)
        events = await chat.finished("crash", run_id)
        assert of_type(events, "tool-interrupted") == [
            {"toolCallId": call_id, "error": "the server stopped during this call"}
        ]
        assert of_type(events, "run-finish")[-1] == {
            "status": "interrupted",
            "reason": "crash_interrupted",
        }
        assert not (await chat.status("crash")).has_active_run
        again = await chat.send("crash", "what happened?")
        await chat.finished("crash", again)
    # The history stayed valid for the model: the cut-off call has an error result.
    closed = [
        b
        for m in model.requests[-1]["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") == "tool_result"
    ]
    assert [(b["tool_use_id"], b["is_error"]) for b in closed] == [(call_id, True)]
    assert "Interrupted" in closed[0]["content"]


async def test_cancel_kills_the_running_sandbox_command(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(tool("workspace_execute_command", {"command": "sleep 300"}))
    async with serving(make_docker_settings(**with_model(model))) as (app, channel):
        chat = Chat(channel)
        run_id = await chat.send("kill", "run a long command")
        await chat.until("kill", lambda e: e["type"] == "tool-call", within=120)
        manager = await app.parts.sandboxes.for_thread("kill")
        # The command's own process, by its whole command line (under gVisor a shell that set
        # the job's limits waits above it, with the command's text among its arguments).
        count = "pgrep -xcf 'sleep 300'"
        # The tool call is announced before its sandbox is up (a first one may be made now).
        deadline = time.monotonic() + 60
        running = await manager.run_command("kill", count)
        while running.stdout.strip() == "0" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            running = await manager.run_command("kill", count)
        assert running.stdout.strip() == "1"
        cancelled = await chat.agent.CancelRun(agent_pb2.CancelRunRequest(thread_id="kill"))
        assert cancelled.run_id == run_id
        events = await chat.finished("kill", run_id)
        assert of_type(events, "tool-interrupted")[-1]["error"] == "cancelled"
        assert of_type(events, "run-finish")[-1] == {
            "status": "cancelled",
            "reason": "user_cancelled",
        }
        after = await manager.run_command("kill", count)
        assert after.stdout.strip() == "0"
