"""The agent loop over real gRPC, with the real Anthropic SDK talking to the local Messages API
stand-in (tests/fake_model.py), which refuses what the real API refuses."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import grpc
import jsonschema
import pytest

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import agent_pb2, tools_pb2, tools_pb2_grpc
from server.agent.titles import TITLE_MAX, thread_title
from server.app import Application
from server.settings import Settings, SettingsError
from server.tools.loading import TOOL_LOADERS
from tests.agent_fixtures import (
    Chat,
    last_tool_results,
    model,
    model_settings,
    nth_card,
    of_type,
)
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, thinking, tool, tool_problem, use
from tests.waiting import until

__all__ = ["model", "model_settings"]  # fixtures, shared


async def test_a_message_streams_text_and_finishes_with_history_kept(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(text("Hello! What should the workflow do?"), text("Noted: every Monday."))
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "build me a workflow")
        events = await chat.finished("t1", run_id)
        assert [e["type"] for e in events] == [
            "run-start",
            "thread-title-updated",
            "text-block",
            "run-finish",
        ]
        assert of_type(events, "thread-title-updated") == [{"title": "build me a workflow"}]
        assert of_type(events, "text-block")[0]["text"] == "Hello! What should the workflow do?"
        assert of_type(events, "run-finish") == [{"status": "completed"}]
        second = await chat.send("t1", "weekly, on Mondays")
        later = await chat.finished("t1", second)
        # The title comes from the thread's first exchange only.
        assert len(of_type(later, "thread-title-updated")) == 1
    # The second request carries the whole conversation, in order, with the system prompt.
    messages = model.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][0]["text"] == "Hello! What should the workflow do?"
    assert (
        "build → verify" in model.requests[1]["system"].lower()
        or "verify" in model.requests[1]["system"]
    )


async def test_every_tool_schema_passes_the_provider_rules(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(text("ok"))
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        listed = await chat.tools.ListTools(tools_pb2.ListToolsRequest())
        tools = [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": from_json(t.input_schema_json),
            }
            for t in listed.tools
        ]
        assert tool_problem(tools) is None
        for definition in tools:
            jsonschema.Draft202012Validator.check_schema(definition["input_schema"])
            assert "$ref" not in json.dumps(definition["input_schema"])
        names = {t["name"] for t in tools}
        assert {
            "create-tasks",
            "update-tasks",
            "ask-user",
            "build-workflow",
            "workspace_read_file",
        } <= names
        run_id = await chat.send("t1", "hi")
        await chat.finished("t1", run_id)
    # The real request carried every tool (no loading them: deferral is off here) but
    # parse-file (the message had no attachment), and the stand-in accepted it.
    assert model.rejected == []
    offered = {t["name"] for t in model.requests[0]["tools"]}
    assert offered == names - TOOL_LOADERS - {"parse-file"}


async def test_a_second_message_while_a_run_is_active_is_refused(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    release = asyncio.Event()
    model.script(Turn(blocks=[{"type": "text", "text": "thinking about it"}], hold=release))
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "first")
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await chat.send("t1", "second")
        assert busy.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "CancelRun" in (busy.value.details() or "")
        release.set()
        events = await chat.finished("t1", run_id)
        assert of_type(events, "run-finish") == [{"status": "completed"}]


async def test_cancel_mid_stream_aborts_the_model_and_the_thread_goes_on(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    never = asyncio.Event()
    model.script(
        Turn(blocks=[{"type": "text", "text": "a long answer"}], hold=never), text("fresh start")
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "go")
        for _ in range(500):
            if model.requests:
                break
            await asyncio.sleep(0.02)
        cancelled = await chat.agent.CancelRun(agent_pb2.CancelRunRequest(thread_id="t1"))
        assert (cancelled.run_id, cancelled.cancelled) == (run_id, True)
        again = await chat.agent.CancelRun(agent_pb2.CancelRunRequest(thread_id="t1"))
        assert (again.run_id, again.cancelled) == ("", False)  # idempotent
        events = await chat.finished("t1", run_id)
        assert of_type(events, "run-finish") == [
            {"status": "cancelled", "reason": "user_cancelled"}
        ]
        assert not (await chat.status("t1")).has_active_run
        await until(lambda: model.aborted, "the model's stream closed", every_s=0.02)
        assert model.aborted == 1  # the stream was really closed
        next_run = await chat.send("t1", "again")
        assert (
            of_type(await chat.finished("t1", next_run), "text-block")[-1]["text"] == "fresh start"
        )


async def test_a_stream_that_dies_is_retried_then_fails_with_the_providers_message(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(
        Turn(blocks=[{"type": "text", "text": "half an ans"}], fault="die"), text("recovered")
    )
    model.script(*[Turn(blocks=[{"type": "text", "text": "broken"}], fault="die")] * 2)
    model.script(Turn(fault=400))
    async with serving(model_settings(model_max_retries=1)) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "first")
        events = await chat.finished("t1", run_id)
        assert of_type(events, "text-block")[-1]["text"] == "recovered"
        assert of_type(events, "run-finish") == [{"status": "completed"}]

        failing = await chat.send("t1", "second")
        events = await chat.finished("t1", failing)
        finish = of_type(events, "run-finish")[-1]
        assert finish["status"] == "error"
        assert "peer closed connection" in finish["reason"]  # the transport's own words
        assert of_type(events, "error")[-1]["provider"] == "anthropic"

        refused = await chat.send("t1", "third")
        events = await chat.finished("t1", refused)
        error = of_type(events, "error")[-1]
        assert error["statusCode"] == 400 and "scripted failure" in error["content"]
    assert len(model.requests) == 2 + 2 + 1  # a 400 is not retried


async def test_bad_tool_calls_become_correctable_errors_for_the_model(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(
        Turn(
            blocks=[
                use("no-such-tool", {}),
                use("update-tasks", '{"tasks": [{"id": "a",'),
                use("update-tasks", {"tasks": [{"id": "a", "description": "x", "status": "nope"}]}),
                use(
                    "update-tasks",
                    {"tasks": [{"id": "a", "description": "Write it", "status": "todo"}]},
                ),
            ]
        ),
        text("fixed"),
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "plan it")
        events = await chat.finished("t1", run_id)
    results = last_tool_results(model.requests[1])
    assert [r["is_error"] for r in results] == [True, True, True, False]
    assert "Unknown tool 'no-such-tool'" in results[0]["content"]
    assert "not valid JSON" in results[1]["content"]
    assert "tasks.0.status" in results[2]["content"] and "call again" in results[2]["content"]
    assert len(of_type(events, "tool-error")) == 3
    assert of_type(events, "tasks-update")[-1]["tasks"]["tasks"][0]["description"] == "Write it"
    assert of_type(events, "run-finish") == [{"status": "completed"}]


async def test_json_numbers_reach_the_stream_as_the_model_sent_them(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    """A tool call's arguments cross the store and the API as JSON text: a whole number stays
    whole, a float stays a float, and an integer past 2^53 is not rounded (live and replayed)."""
    numbers = {"huge": 2**53 + 1, "whole": 3, "real": 3.0, "negative": -(2**60)}
    model.script(
        Turn(blocks=[use("update-tasks", {"tasks": [], "numbers": numbers}, "toolu_numbers")]),
        text("done"),
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        events = await chat.finished("t1", await chat.send("t1", "count"))
        replayed = [
            from_json(r.event.payload_json)
            async for r in chat.agent.StreamEvents(agent_pb2.StreamEventsRequest(thread_id="t1"))
            if r.event.type == "tool-call"
        ]
    for args in (
        of_type(events, "tool-call")[0]["args"]["numbers"],
        replayed[0]["args"]["numbers"],
    ):
        assert args == numbers
        assert [type(args[k]) for k in ("huge", "whole", "real")] == [int, int, float]


async def test_thinking_streams_as_reasoning_and_goes_back_with_the_tool_results(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    """With a thinking budget the model's thinking is streamed live (reasoning-delta) and
    kept (reasoning-block, before the turn's text); the thinking block, signature unchanged,
    leads the assistant message the tool results answer (the stand-in refuses otherwise)."""
    tasks = {"tasks": [{"id": "a", "description": "Draft it", "status": "todo"}]}
    model.script(
        text("Hello."),
        Turn(blocks=[thinking("A plan first: one task."), use("update-tasks", tasks)]),
        Turn(blocks=[thinking("The task list is set."), {"type": "text", "text": "Planned."}]),
    )
    async with serving(model_settings(model_thinking_budget_tokens=2048)) as (app, channel):
        chat = Chat(channel)
        await chat.finished("t1", await chat.send("t1", "hi"))
        follow = await _following(app, chat, "t1")
        run_id = await chat.send("t1", "plan it")
        deltas: list[str] = []
        async for response in follow:
            if response.event.type == "reasoning-delta":
                deltas.append(from_json(response.event.payload_json)["text"])
            if response.event.type == "run-finish":
                follow.cancel()
                break
        events = await chat.finished("t1", run_id)
    assert not model.rejected, model.rejected
    assert of_type(events, "reasoning-block") == [
        {"text": "A plan first: one task."},
        {"text": "The task list is set."},
    ]
    kinds = [e["type"] for e in events if e["run_id"] == run_id]
    assert kinds.index("reasoning-block") < kinds.index("tool-call")
    assert kinds[-3:] == ["reasoning-block", "text-block", "run-finish"]
    assert "".join(deltas) == "A plan first: one task.The task list is set."
    answered = model.requests[2]
    assert answered["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert [b["type"] for b in answered["messages"][-2]["content"]] == ["thinking", "tool_use"]


def test_a_thinking_budget_outside_what_the_api_takes_is_refused(
    make_settings: Callable[..., Settings],
) -> None:
    for budget in (512, 8192):
        with pytest.raises(SettingsError, match=r"^invalid settings: .* at least 1024 and below"):
            make_settings(model_thinking_budget_tokens=budget, model_max_tokens=8192)


async def test_approval_gated_tool_waits_then_runs_or_is_denied(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(
        tool("run-workflow", {"workflowId": "wf-missing"}),
        text("it ran"),
        tool("run-workflow", {"workflowId": "wf-other"}),
        text("understood"),
        tool("run-workflow", {"workflowId": "wf-third"}),
        text("ok"),
        tool("run-workflow", {"workflowId": "wf-third"}),
        text("ran again without asking"),
        tool("run-workflow", {"workflowId": "wf-fifth"}),
        text("another workflow asks again"),
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "run it")
        card = await chat.card("t1")
        assert card["inputType"] == "approval" and card["toolName"] == "run-workflow"
        assert card["args"] == {"workflowId": "wf-missing"}
        status = await chat.status("t1")
        assert status.is_suspended and status.active_run_id == run_id
        assert await chat.confirm("t1", card["requestId"], kind="approval", approved=True) == run_id
        events = await chat.finished("t1", run_id)
        # Approved: the tool really ran (and reported the unknown workflow to the model).
        assert "wf-missing" in last_tool_results(model.requests[1])[0]["content"]
        assert of_type(events, "run-finish")[-1] == {"status": "completed"}
        # An answer to an answered card, or to no card at all.
        with pytest.raises(grpc.aio.AioRpcError) as twice:
            await chat.confirm("t1", card["requestId"], kind="approval", approved=True)
        assert twice.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await chat.confirm("t1", "req_nope", kind="approval", approved=True)
        assert unknown.value.code() is grpc.StatusCode.NOT_FOUND

        denied_run = await chat.send("t1", "run the other one")
        card = await nth_card(chat, "t1", 2)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await chat.confirm("t1", card["requestId"], kind="approval")
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "approved" in (bad.value.details() or "")
        await chat.confirm(
            "t1", card["requestId"], kind="approval", approved=False, userInput="not now"
        )
        await chat.finished("t1", denied_run)
        denial = last_tool_results(model.requests[3])[0]
        assert (
            denial["is_error"] and "denied" in denial["content"] and "not now" in denial["content"]
        )

        session_run = await chat.send("t1", "third")
        card = await nth_card(chat, "t1", 3)
        await chat.confirm("t1", card["requestId"], kind="approval", approved=True, scope="session")
        await chat.finished("t1", session_run)
        remembered = await chat.send("t1", "fourth")
        events = await chat.finished("t1", remembered)
        assert not of_type([e for e in events if e["run_id"] == remembered], "confirmation-request")
        assert "wf-third" in last_tool_results(model.requests[7])[0]["content"]
        # "Always" covered that workflow only: another one asks again.
        other = await chat.send("t1", "fifth")
        card = await nth_card(chat, "t1", 4)
        assert card["args"] == {"workflowId": "wf-fifth"}
        await chat.confirm("t1", card["requestId"], kind="approval", approved=False)
        await chat.finished("t1", other)


async def _following(app: Application, chat: Chat, thread: str) -> Any:
    """A live follower of the thread from its newest event, once the service has it
    registered (live-only events reach only registered followers)."""
    cursor = str((await chat.status(thread)).last_event_id)
    follow = chat.agent.StreamEvents(
        agent_pb2.StreamEventsRequest(thread_id=thread, after=cursor, follow=True)
    )
    for _ in range(500):
        if app.parts.events.subscriber_count(thread):
            break
        await asyncio.sleep(0.01)
    return follow


async def test_ask_user_suspends_with_questions_and_gets_the_answers(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    question = {
        "id": "channel",
        "question": "Where should alerts go?",
        "type": "single",
        "options": ["Slack", "Email"],
    }
    model.script(tool("ask-user", {"questions": [question]}), text("Slack it is"))
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "set up alerts")
        card = await chat.card("t1")
        assert card["inputType"] == "questions" and card["questions"] == [question]
        answers = [{"questionId": "channel", "selectedOptions": ["Slack"]}]
        await chat.confirm("t1", card["requestId"], kind="questions", answers=answers)
        await chat.finished("t1", run_id)
    result = json.loads(last_tool_results(model.requests[1])[0]["content"])
    assert result["answered"] is True
    assert result["answers"][0]["selectedOptions"] == ["Slack"]


async def test_a_suspended_run_survives_a_restart_and_resumes_on_confirm(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(tool("run-workflow", {"workflowId": "wf-1"}), text("done after restart"))
    settings = model_settings()
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "run it")
        card = await chat.card("t1")
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        status = await chat.status("t1")
        assert status.is_suspended and status.active_run_id == run_id
        assert await chat.confirm("t1", card["requestId"], kind="approval", approved=True) == run_id
        events = await chat.finished("t1", run_id)
        assert of_type(events, "text-block")[-1]["text"] == "done after restart"
        assert of_type(events, "run-finish")[-1] == {"status": "completed"}


async def test_unanswered_confirmations_are_swept_as_denied(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(tool("run-workflow", {"workflowId": "wf-1"}), text("nobody answered"))
    settings = model_settings(
        confirmation_timeout_seconds=0.5, confirmation_sweep_interval_seconds=0.2
    )
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "run it")
        events = await chat.finished("t1", run_id, within=30)
    assert of_type(events, "run-finish")[-1] == {"status": "completed"}
    result = last_tool_results(model.requests[1])[0]
    assert result["is_error"] and "denied" in result["content"]


async def test_deleting_a_thread_mid_run_stops_it_and_leaves_nothing(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    never = asyncio.Event()
    model.script(Turn(blocks=[{"type": "text", "text": "working"}], hold=never))
    async with serving(model_settings()) as (app, channel):
        chat = Chat(channel)
        await chat.send("gone", "go")
        for _ in range(500):
            if model.requests:
                break
            await asyncio.sleep(0.02)
        await chat.agent.DeleteThread(agent_pb2.DeleteThreadRequest(thread_id="gone"))
        await asyncio.sleep(0.2)
        assert not await app.parts.threads.exists("gone")
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await chat.status("gone")
        assert missing.value.code() is grpc.StatusCode.NOT_FOUND


async def test_call_tool_refuses_tools_that_ask_the_user_without_side_effects(
    model_settings: Callable[..., Settings],
) -> None:
    plan = {
        "tasks": [{"id": "a", "title": "A", "kind": "delegate", "spec": "x", "deps": []}],
        "planningContext": {"source": "planning-skill", "summary": "s"},
    }
    async with serving(model_settings()) as (app, channel):
        chat = Chat(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await chat.tools.CallTool(
                tools_pb2.CallToolRequest(
                    thread_id="direct", tool_name="create-tasks", arguments_json=to_json(plan)
                )
            )
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "only the agent" in (refused.value.details() or "")
        assert await app.parts.plans.get("direct") is None


async def test_overload_and_rate_limit_answers_are_retried_with_backoff(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(text("hi"), Turn(fault=529), Turn(fault=429), text("third time lucky"))
    async with serving(model_settings(model_max_retries=2)) as (app, channel):
        chat = Chat(channel)
        await chat.finished("t1", await chat.send("t1", "first"))
        follow = await _following(app, chat, "t1")
        run_id = await chat.send("t1", "hello")
        live: list[str] = []
        async for response in follow:
            if response.event.type in ("status", "text-delta"):
                live.append(response.event.type)
            if response.event.type == "run-finish":
                assert from_json(response.event.payload_json) == {"status": "completed"}
                assert response.event.run_id == run_id
                follow.cancel()
                break
    assert len(model.requests) == 4
    # Live-only progress reached the follower: a status, then the streamed text.
    assert live[0] == "status" and "text-delta" in live


# Which reference action gates each tool (n8n-spec §8); a tool losing its gate fails here.
GATES = {
    "run-workflow": "runWorkflow",
    "delete-workflow": "deleteWorkflow",
    "unarchive-workflow": "updateWorkflow",
    "publish-workflow": "publishWorkflow",
    "unpublish-workflow": "publishWorkflow",
    "restore-workflow-version": "restoreWorkflowVersion",
    "create-data-table": "createDataTable",
    "delete-data-table": "deleteDataTable",
    "add-data-table-column": "mutateDataTableSchema",
    "delete-data-table-column": "mutateDataTableSchema",
    "rename-data-table-column": "mutateDataTableSchema",
    "insert-data-table-rows": "mutateDataTableRows",
    "update-data-table-rows": "mutateDataTableRows",
    "delete-data-table-rows": "mutateDataTableRows",
    "tag-workflow": "tagWorkflow",
    "create-folder": "createFolder",
    "delete-folder": "deleteFolder",
    "move-workflow-to-folder": "moveWorkflowToFolder",
    "cleanup-test-executions": "cleanupTestExecutions",
    "delete-credential": "deleteCredential",
    "fetch-url": "fetchUrl",
    "n8n-docs": "fetchUrl",
    "test-credential": "fetchUrl",
    "web-search": "webSearch",
    "build-workflow": "updateWorkflow",  # and createWorkflow
    "setup-credentials": "createCredential",
    "browser_create_credential": "createCredential",
    "execute-node": "executeNode",
}


async def test_every_gated_action_is_declared_on_its_tool(channel: grpc.aio.Channel) -> None:
    listed = await tools_pb2_grpc.ToolsStub(channel).ListTools(
        tools_pb2.ListToolsRequest(include_unavailable=True)
    )
    gated = {t.name: t.hitl_action for t in listed.tools if t.hitl_action}
    assert gated == GATES


def test_a_title_is_the_first_message_cut_at_a_word() -> None:
    assert thread_title("  build\n me   a workflow ") == "build me a workflow"
    long = "Build a workflow that posts every new order from the shop webhook to Slack and a sheet"
    title = thread_title(long)
    assert title.endswith("…") and len(title) <= TITLE_MAX + 1
    assert long.startswith(title[:-1]) and not title[:-1].endswith(" ")
    assert thread_title("   ") == "New conversation"
