"""`instance-ai chat` and `instance-ai tools` against a real server process, with the Messages
API stand-in as the model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.agent_fixtures import model, model_env
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.test_cli import CLI, ServerProcess, start_server, stop_server
from tests.web_servers import Servers

__all__ = ["model"]  # fixtures, shared


@pytest.fixture
async def served(tmp_path: Path, model: FakeMessagesAPI) -> AsyncIterator[ServerProcess]:
    server = await asyncio.to_thread(start_server, tmp_path / "data", env=model_env(model))
    yield server
    stop_server(server)


async def cli(
    server: ServerProcess, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    # In a thread: the model stand-in answers from this test's event loop meanwhile.
    return await asyncio.to_thread(
        subprocess.run,
        [CLI, *args, "--server", server.address],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


async def test_chat_streams_the_run_and_answers_a_card_at_the_prompt(
    served: ServerProcess, model: FakeMessagesAPI
) -> None:
    model.script(
        tool("run-workflow", {"workflowId": "wf-9"}, say="Let me run it."), text("All set.")
    )
    result = await cli(served, "chat", "run my workflow", "--thread", "c1", stdin="y\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout
    assert "Let me run it." in lines
    assert "→ run-workflow" in lines and "allow?" in lines
    assert "wf-9" in lines  # the tool ran after the approval and reported the unknown id
    assert "All set." in lines and "run completed" in lines
    model.script(tool("run-workflow", {"workflowId": "wf-9"}), text("Okay, I will not run it."))
    denied = await cli(served, "chat", "again", "--thread", "c1", stdin="n\n")
    assert denied.returncode == 0, denied.stderr
    assert "✗ run-workflow: The user denied run-workflow" in denied.stdout
    assert "Okay, I will not run it." in denied.stdout
    assert "Let me run it." not in denied.stdout  # only this turn is shown


async def test_chat_json_prints_the_events_in_the_shape_events_json_does(
    served: ServerProcess, model: FakeMessagesAPI
) -> None:
    model.script(text("Hello there."))
    result = await cli(served, "chat", "hi", "--thread", "j1", "--json")
    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    # n8n's event shape, as `instance-ai events --json` prints it.
    for event in printed:
        assert {"type", "runId", "agentId", "ts", "payload", "threadId"} <= set(event), event
        assert event["threadId"] == "j1" and isinstance(event["ts"], int)
    assert printed[-1]["type"] == "run-finish"
    assert printed[-1]["payload"]["status"] == "completed"
    assert printed[-1]["agentId"] == "orchestrator" and printed[-1]["runId"]
    listed = await cli(served, "events", "j1", "--json")
    assert listed.returncode == 0, listed.stderr
    stored = {event["id"]: event for event in json.loads(listed.stdout)["events"]}
    durable = [event for event in printed if "id" in event]
    assert durable and all(stored[event["id"]] == event for event in durable)


async def test_chat_attaches_files_the_agent_reads(
    served: ServerProcess, model: FakeMessagesAPI, tmp_path: Path
) -> None:
    table = tmp_path / "stock.csv"
    table.write_text("item,count\nbolts,120\n")
    model.script(tool("parse-file", {}), text("120 bolts."))
    result = await cli(served, "chat", "how many bolts?", "--thread", "c3", "--attach", str(table))
    assert result.returncode == 0, result.stderr
    assert "✓ parse-file" in result.stdout and "bolts" in result.stdout
    sent = model.requests[0]["messages"][0]["content"][0]["text"]
    assert "0: stock.csv (text/csv, " in sent
    missing = await cli(served, "chat", "hi", "--attach", str(tmp_path / "nope.csv"))
    assert missing.returncode != 0 and "nope.csv" in missing.stderr


async def test_tools_list_and_call(served: ServerProcess) -> None:
    listed = await cli(served, "tools", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    assert tools["create-tasks"]["inputSchema"]["type"] == "object"
    assert tools["create-tasks"]["group"] == "orchestration"
    assert tools["run-workflow"]["hitlAction"] == "runWorkflow"
    # Conditional tools are listed too, saying what they need.
    assert tools["web-search"]["registered"] is False
    assert "SEARXNG" in tools["web-search"]["requires"]
    assert tools["build-workflow"]["registered"] is True
    plain = await cli(served, "tools", "list")
    assert "web-search" in plain.stdout and "not registered: needs" in plain.stdout

    items = {"tasks": [{"id": "a", "description": "Draft the workflow", "status": "in_progress"}]}
    called = await cli(
        served, "tools", "call", "update-tasks", "--args", json.dumps(items), "--json"
    )
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout) == {
        "result": {"result": "Checklist saved (1 items)."},
        "isError": False,
    }

    gated = await cli(served, "tools", "call", "run-workflow", "--args", '{"workflowId": "x"}')
    assert gated.returncode == 1
    assert "FAILED_PRECONDITION" in gated.stderr and "always_allow" in gated.stderr
    bad = await cli(served, "tools", "call", "update-tasks", "--args", "[1]")
    assert bad.returncode == 2 and "JSON object" in bad.stderr


async def test_chat_answers_a_domain_card_with_the_choice_typed(
    tmp_path: Path, model: FakeMessagesAPI
) -> None:
    site = Servers()
    await site.start()
    env = model_env(model) | {"INSTANCE_AI_WEB_FETCH_ALLOW_HOSTS": f"127.0.0.1:{site.site_port}"}
    server = await asyncio.to_thread(start_server, tmp_path / "data", env=env)
    try:
        model.script(
            tool("fetch-url", {"url": site.url("/notes.txt")}),
            tool("fetch-url", {"url": site.url("/article")}),
            text("Read them."),
        )
        result = await cli(server, "chat", "read the notes", "--thread", "d1", stdin="d\n")
    finally:
        stop_server(server)
        await site.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("fetch from this host?") == 1  # the domain was remembered
    assert "Read them." in result.stdout and "run completed" in result.stdout
