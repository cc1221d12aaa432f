"""Plans (create-tasks: validation, approval, scheduling, replan) and background tasks (limit,
corrections, cancellation), through gRPC with the Messages API stand-in."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from instance_ai.v1 import agent_pb2, tools_pb2, tools_pb2_grpc
from server.runtime.plans import PlanValidationError, validate_plan
from server.settings import Settings
from tests.agent_fixtures import Chat, Event, last_tool_results, model, model_settings, of_type
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool, use

__all__ = ["model", "model_settings"]  # fixtures, shared

CONTEXT = {"source": "planning-skill", "summary": "Two linked workflows"}


def task(task_id: str, *deps: str, kind: str = "delegate") -> dict[str, Any]:
    return {
        "id": task_id,
        "title": f"Task {task_id}",
        "kind": kind,
        "spec": f"do {task_id}",
        "deps": list(deps),
    }


def is_background(request: dict[str, Any]) -> bool:
    return str(request["system"]).startswith("You are a background")


def main_requests(model: FakeMessagesAPI) -> list[dict[str, Any]]:
    """The orchestrator's requests (background agents talk to the model concurrently)."""
    return [r for r in model.requests if not is_background(r)]


def briefing(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"][0]["text"])


async def approved_plan(chat: Chat, message: str = "plan it") -> str:
    """Send the message whose run proposes the plan, and approve the plan card."""
    run_id = await chat.send("t1", message)
    card = await chat.card("t1")
    await chat.confirm("t1", card["requestId"], kind="approval", approved=True)
    return run_id


async def follow_up_finished(chat: Chat, run_id: str) -> list[Event]:
    """The thread's events until a run other than `run_id` (the plan's follow-up) ends."""
    return await chat.until("t1", lambda e: e["type"] == "run-finish" and e["run_id"] != run_id)


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([task("a"), task("a")], "Duplicate task ids: a"),
        ([task("a", "zz")], 'Task "a" depends on unknown task "zz"'),
        ([task("a", "b"), task("b", "c"), task("c", "a")], "Dependency cycle: a -> b -> c -> a"),
        (
            [task("a"), task("check", "a", kind="checkpoint")],
            'Checkpoint "check" must depend on a build-workflow',
        ),
    ],
)
def test_plan_validation_names_the_problem(tasks: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(PlanValidationError) as error:
        validate_plan(tasks)
    assert message in str(error.value)


async def test_an_invalid_plan_goes_back_to_the_model_to_revise(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(
        Turn(
            blocks=[
                use(
                    "create-tasks",
                    {"tasks": [task("a", "b"), task("b", "a")], "planningContext": CONTEXT},
                ),
                use(
                    "create-tasks",
                    {"tasks": [task("a")], "planningContext": CONTEXT | {"source": "replan"}},
                ),
            ]
        ),
        text("I will revise it"),
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "plan it")
        await chat.finished("t1", run_id)
    cycle, source = last_tool_results(model.requests[1])
    assert (
        cycle["is_error"]
        and "Dependency cycle" in cycle["content"]
        and "Revise" in cycle["content"]
    )
    assert source["is_error"] and '"planning-skill"' in source["content"]


async def test_an_approved_plan_runs_its_tasks_in_dependency_order_then_synthesizes(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.responder = lambda request: (
        text(f"finished {briefing(request)}") if is_background(request) else None
    )
    model.script(
        tool("create-tasks", {"tasks": [task("a"), task("b", "a")], "planningContext": CONTEXT}),
        text("The plan is running."),
        text("Both workflows are done."),  # the synthesize follow-up
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "build two linked workflows")
        card = await chat.card("t1")
        assert card["inputType"] == "plan-review" and card["severity"] == "info"
        assert [t["id"] for t in card["tasks"]["tasks"]] == ["a", "b"]
        assert all(t["status"] == "todo" for t in card["tasks"]["tasks"])
        assert [t["id"] for t in card["planItems"]] == ["a", "b"]
        await chat.confirm("t1", card["requestId"], kind="approval", approved=True)
        events = await follow_up_finished(chat, run_id)
    approved = json.loads(last_tool_results(main_requests(model)[1])[0]["content"])
    assert approved["result"] == "Plan approved: 2 tasks, 1 started."
    spawned = [p["taskId"] for p in of_type(events, "agent-spawned")]
    order = [
        (e["type"], e["agent_id"])
        for e in events
        if e["type"] in ("agent-spawned", "agent-completed")
    ]
    assert [kind for kind, _ in order] == ["agent-spawned", "agent-completed"] * 2  # b waited for a
    assert len(spawned) == 2
    final = of_type(events, "tasks-update")[-1]["tasks"]["tasks"]
    assert [t["status"] for t in final] == ["done", "done"]
    follow_up = main_requests(model)[-1]
    assert 'type="synthesize"' in follow_up["messages"][-1]["content"][0]["text"]
    assert of_type(events, "text-block")[-1]["text"] == "Both workflows are done."


async def test_a_planned_build_whose_run_saves_nothing_fails_and_so_do_its_dependants(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    """A build task's run that ends without a saved workflow is a failed task, whatever its
    last words (the reference's "ended without saving"); its dependants are cancelled with
    the reason, and the plan asks for a replan instead of a synthesis."""
    tasks = [
        task("a", kind="build-workflow"),
        task("b", "a", kind="build-workflow"),
        task("check", "a", kind="checkpoint"),
    ]
    context = CONTEXT | {"assumptions": ["orders come in as JSON"], "postBuildRunRequested": True}
    model.script(
        tool("create-tasks", {"tasks": tasks, "planningContext": context}),
        text("The plan is running."),
        text("Built A."),  # claims it, builds nothing
        text("Task a could not be built; shall I try another way?"),  # the replan follow-up
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "build two workflows and check the first")
        card = await chat.card("t1")
        assert "Assumptions:\n- orders come in as JSON" in card["message"]
        await chat.confirm("t1", card["requestId"], kind="approval", approved=True)
        events = await chat.until(
            "t1",
            lambda e: e["type"] == "text-block" and "could not be built" in e["payload"]["text"],
        )
    # Every task runs as a run of the thread with the orchestrator's prompt, never an agent.
    assert of_type(events, "agent-spawned") == []
    assert not any(is_background(r) for r in model.requests)
    last_texts = [r["messages"][-1]["content"][0].get("text", "") for r in model.requests]
    follow_ups = [t for t in last_texts if "<planned-task-follow-up" in t]
    assert [re.search(r'type="([a-z-]+)"', t).group(1) for t in follow_ups] == [  # type: ignore[union-attr]
        "build-workflow",
        "replan",
    ]
    # The plan's context reached the task: its assumptions and the run the user asked for.
    assert "workflow-builder skill" in follow_ups[0]
    assert "The plan assumes: orders come in as JSON." in follow_ups[0]
    assert "run it live with run-workflow" in follow_ups[0]
    assert "verification reaches partial" in follow_ups[0]
    assert "Workflow build run ended without saving a workflow" in follow_ups[1]
    runs = [e for e in events if e["type"] == "run-start"]
    assert len({e["run_id"] for e in runs}) == 3 and run_id == runs[0]["run_id"]
    final = {t["id"]: t for t in of_type(events, "tasks-update")[-1]["tasks"]["tasks"]}
    assert final["a"]["status"] == "failed"
    assert final["a"]["detail"] == "Workflow build run ended without saving a workflow"
    for dependant in ("b", "check"):
        assert final[dependant]["status"] == "cancelled"
        assert final[dependant]["detail"] == (
            'Cancelled: dependency "a" failed: Workflow build run ended without saving a workflow'
        )


async def test_a_denied_plan_is_cancelled_and_not_resubmitted_in_the_same_turn(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    plan = {"tasks": [task("a")], "planningContext": CONTEXT}
    model.script(
        tool("create-tasks", plan), tool("create-tasks", plan), text("What would you like instead?")
    )
    async with serving(model_settings()) as (app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "plan it")
        card = await chat.card("t1")
        await chat.confirm("t1", card["requestId"], kind="planDeny")
        events = await chat.finished("t1", run_id)
        stored = await app.parts.plans.get("t1")
    assert stored is not None and stored.status == "cancelled"
    assert of_type(events, "tasks-update")[-1] == {"tasks": {"tasks": []}, "planItems": []}
    denied = json.loads(last_tool_results(model.requests[1])[0]["content"])
    assert "denied the plan" in denied["result"]
    again = last_tool_results(model.requests[2])[0]
    assert again["is_error"] and "denied a plan in this turn" in again["content"]
    assert len(of_type(events, "confirmation-request")) == 1


async def test_requested_changes_come_back_to_the_model_and_the_plan_waits(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(
        tool("create-tasks", {"tasks": [task("a")], "planningContext": CONTEXT}), text("Revising.")
    )
    async with serving(model_settings()) as (app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "plan it")
        card = await chat.card("t1")
        await chat.confirm(
            "t1", card["requestId"], kind="approval", approved=False, userInput="add a Slack step"
        )
        await chat.finished("t1", run_id)
        stored = await app.parts.plans.get("t1")
    assert stored is not None and stored.status == "awaiting_approval"
    result = json.loads(last_tool_results(model.requests[1])[0]["content"])
    assert "add a Slack step" in result["result"] and "Revise" in result["result"]


async def test_a_failed_task_cancels_its_dependents_and_asks_for_a_replan(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    def respond(request: dict[str, Any]) -> Turn | None:
        if not is_background(request):
            return None
        return Turn(fault=400) if briefing(request) == "do a" else text("ok")

    model.responder = respond
    model.script(
        tool(
            "create-tasks",
            {"tasks": [task("a"), task("b", "a"), task("c")], "planningContext": CONTEXT},
        ),
        text("Started."),
        text("Task a failed; here is a new plan."),  # the replan follow-up
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await approved_plan(chat)
        events = await follow_up_finished(chat, run_id)
    final = {t["id"]: t for t in of_type(events, "tasks-update")[-1]["tasks"]["tasks"]}
    assert final["a"]["status"] == "failed"
    assert final["b"]["status"] == "cancelled" and 'dependency "a" failed' in final["b"]["detail"]
    assert final["c"]["status"] == "done"
    replan = main_requests(model)[-1]
    assert 'type="replan"' in replan["messages"][-1]["content"][0]["text"]


async def test_cancelling_a_planned_task_settles_its_plan(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    """A person cancels one running task: it and what depends on it are cancelled, the
    others finish, and the plan ends (its synthesize follow-up runs) instead of waiting on
    the cancelled task for ever."""
    never = asyncio.Event()

    def respond(request: dict[str, Any]) -> Turn | None:
        if not is_background(request):
            return None
        if briefing(request) == "do a":
            return Turn(blocks=[{"type": "text", "text": "working on a"}], hold=never)
        return text(f"finished {briefing(request)}")

    model.responder = respond
    model.script(
        tool(
            "create-tasks",
            {"tasks": [task("a"), task("b", "a"), task("c")], "planningContext": CONTEXT},
        ),
        text("The plan is running."),
        text("c is done; a was cancelled, and b with it."),  # the synthesize follow-up
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await approved_plan(chat)
        spawned = await chat.until(
            "t1",
            lambda e: e["type"] == "agent-spawned" and e["payload"]["title"] == "Task a",
        )
        task_a = spawned[-1]["payload"]["taskId"]
        cancelled = await chat.agent.CancelTask(
            agent_pb2.CancelTaskRequest(thread_id="t1", task_id=task_a)
        )
        assert cancelled.cancelled
        events = await follow_up_finished(chat, run_id)
    final = {t["id"]: t for t in of_type(events, "tasks-update")[-1]["tasks"]["tasks"]}
    assert final["a"]["status"] == "cancelled"
    assert (
        final["b"]["status"] == "cancelled" and 'dependency "a" cancelled' in final["b"]["detail"]
    )
    assert final["c"]["status"] == "done"
    synthesize = main_requests(model)[-1]["messages"][-1]["content"][0]["text"]
    assert 'type="synthesize"' in synthesize


async def test_a_stuck_planned_task_times_out_and_the_plan_replans(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    never = asyncio.Event()

    def respond(request: dict[str, Any]) -> Turn | None:
        if not is_background(request):
            return None
        return Turn(blocks=[{"type": "text", "text": "thinking hard"}], hold=never)

    model.responder = respond
    model.script(
        tool("create-tasks", {"tasks": [task("a"), task("b", "a")], "planningContext": CONTEXT}),
        text("The plan is running."),
        text("Task a got stuck; a new plan."),  # the replan follow-up
    )
    settings = model_settings(background_task_timeout_seconds=1)
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        run_id = await approved_plan(chat)
        events = await follow_up_finished(chat, run_id)
    [completed] = of_type(events, "agent-completed")
    assert completed["status"] == "error" and "no result within 1 s" in completed["error"]
    final = {t["id"]: t for t in of_type(events, "tasks-update")[-1]["tasks"]["tasks"]}
    assert (final["a"]["status"], final["b"]["status"]) == ("failed", "cancelled")
    replan = main_requests(model)[-1]["messages"][-1]["content"][0]["text"]
    assert 'type="replan"' in replan and "no result within 1 s" in replan


async def test_background_tasks_limit_corrections_and_cancellation(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    release = asyncio.Event()

    def respond(request: dict[str, Any]) -> Turn | None:
        if not is_background(request):
            return None
        if len(request["messages"]) == 1:  # first turn: work, then call a tool
            return Turn(
                blocks=[{"type": "text", "text": "working"}, use("list-workflows", {})],
                hold=release,
            )
        said = " ".join(b.get("text", "") for b in request["messages"][-1]["content"])
        return text(f"report ({said.strip() or 'no corrections'})")

    model.responder = respond
    model.script(
        Turn(
            blocks=[
                use("delegate", {"role": "researcher", "briefing": f"look into {n}"})
                for n in range(6)
            ]
        ),
        text("Six asked, five started."),
    )
    async with serving(model_settings(background_task_limit=5)) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "research six things")
        await chat.finished("t1", run_id)
        results = [json.loads(r["content"]) for r in last_tool_results(main_requests(model)[-1])]
        assert sum("Started background task" in r["result"] for r in results) == 5
        assert sum("limit of 5 concurrent tasks reached" in r["result"] for r in results) == 1
        status = await chat.status("t1")
        tasks = [t.task_id for t in status.background_tasks]
        assert len(tasks) == 5 and all(t.status == "running" for t in status.background_tasks)

        first, second = tasks[0], tasks[1]
        corrected = await chat.agent.CorrectTask(
            agent_pb2.CorrectTaskRequest(thread_id="t1", task_id=first, correction="only EU data")
        )
        assert corrected.result == "queued"
        missing = await chat.agent.CorrectTask(
            agent_pb2.CorrectTaskRequest(thread_id="t1", task_id="task_nope", correction="x")
        )
        assert missing.result == "task-not-found"
        cancelled = await chat.agent.CancelTask(
            agent_pb2.CancelTaskRequest(thread_id="t1", task_id=second)
        )
        assert cancelled.cancelled
        assert len((await chat.status("t1")).background_tasks) == 4

        release.set()
        events = await chat.until(
            "t1",
            lambda e: e["type"] == "agent-completed" and e["payload"]["status"] == "completed",
            within=30,
        )
        for _ in range(200):
            if not (await chat.status("t1")).background_tasks:
                break
            await asyncio.sleep(0.05)
        assert not (await chat.status("t1")).background_tasks
        later = await chat.agent.CorrectTask(
            agent_pb2.CorrectTaskRequest(thread_id="t1", task_id=first, correction="too late")
        )
        assert later.result == "task-completed"
        events = await chat.events("t1")
    completions = of_type(events, "agent-completed")
    assert sorted(c["status"] for c in completions) == ["cancelled"] + ["completed"] * 4
    reports = [c["result"] for c in completions if c["status"] == "completed"]
    assert sum("Correction: only EU data" in r for r in reports) == 1


async def test_cancel_run_stops_the_threads_background_tasks(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    never = asyncio.Event()
    model.responder = lambda r: (
        Turn(blocks=[{"type": "text", "text": "on it"}], hold=never) if is_background(r) else None
    )
    model.script(
        Turn(
            blocks=[
                use("delegate", {"role": "scout", "briefing": f"look at {n}"}) for n in range(2)
            ]
        ),
        text("Two scouts are out."),
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "scout two things")
        await chat.finished("t1", run_id)
        assert len((await chat.status("t1")).background_tasks) == 2
        stopped = await chat.agent.CancelRun(agent_pb2.CancelRunRequest(thread_id="t1"))
        assert not stopped.cancelled  # no run was open; the tasks stop all the same
        assert not (await chat.status("t1")).background_tasks
        events = await chat.events("t1")
    assert [c["status"] for c in of_type(events, "agent-completed")] == ["cancelled", "cancelled"]


async def test_a_background_agent_gets_its_kinds_tools_and_asks_the_user_itself(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    question: dict[str, Any] = {"id": "table", "question": "Which table?", "type": "single"}
    question["options"] = ["orders", "customers"]

    def respond(request: dict[str, Any]) -> Turn | None:
        if not is_background(request):
            return None
        if len(request["messages"]) == 1:
            return tool("ask-user", {"questions": [question]})
        answered = json.loads(last_tool_results(request)[0]["content"])
        return text(f"seeded {answered['answers'][0]['selectedOptions'][0]}")

    model.responder = respond
    model.script(
        tool("delegate", {"role": "eval-setup", "briefing": "seed the evaluation data"}),
        text("Started."),
    )
    async with serving(model_settings()) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "set up the evaluation")
        await chat.finished("t1", run_id)
        card = await chat.card("t1")
        spawned_event = next(e for e in await chat.events("t1") if e["type"] == "agent-spawned")
        spawned = spawned_event["payload"]
        assert card["inputType"] == "questions" and card["questions"] == [question]
        answers = [{"questionId": "table", "selectedOptions": ["orders"]}]
        await chat.confirm("t1", card["requestId"], kind="questions", answers=answers)
        events = await chat.until("t1", lambda e: e["type"] == "agent-completed")
        listed = await tools_pb2_grpc.ToolsStub(channel).ListTools(tools_pb2.ListToolsRequest())
        registered = {t.name: t.group for t in listed.tools if t.available}
    # The card came from the background agent, which went on with the answer.
    asked = next(e for e in events if e["type"] == "confirmation-request")
    assert asked["agent_id"] == spawned_event["agent_id"] != "orchestrator"
    assert of_type(events, "agent-completed")[-1]["result"] == "seeded orders"
    # Its tools: the seed's column for background agents, and the event says the same.
    offered = {t["name"] for t in next(r for r in model.requests if is_background(r))["tools"]}
    assert offered == set(spawned["tools"])
    expected = {
        name
        for name, group in registered.items()
        if group in ("workflows", "nodes", "data-tables")
        and name not in ("build-workflow", "validate-workflow", "materialize-node-type")
    } | {"ask-user", "workspace_read_file", "workspace_grep"}
    expected |= {"search-credential-types", "list-credentials", "setup-credentials"}
    assert offered == expected
    for orchestrators_own in (
        "create-tasks",
        "delegate",
        "load_tool",
        "build-workflow",
        "verify-built-workflow",
        "report-verification-verdict",
        "apply-workflow-credentials",
        "run-workflow",
        "workspace_write_file",
        "workspace_execute_command",
        "fetch-url",
        "browser_navigate",
        "delete-credential",
    ):
        assert orchestrators_own not in offered


async def test_a_planned_task_cut_off_by_a_restart_fails_and_its_plan_replans(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    never = asyncio.Event()
    model.script(
        tool(
            "create-tasks",
            {"tasks": [task("a", kind="build-workflow")], "planningContext": CONTEXT},
        ),
        text("The plan is running."),
        Turn(blocks=[{"type": "text", "text": "building"}], hold=never),  # a's run hangs
    )
    settings = model_settings()
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        run_id = await chat.send("t1", "build it")
        card = await chat.card("t1")
        await chat.confirm("t1", card["requestId"], kind="approval", approved=True)
        await chat.until("t1", lambda e: e["type"] == "run-start" and e["run_id"] != run_id)
        for _ in range(200):  # a's run has asked the model
            if len(model.requests) == 3:
                break
            await asyncio.sleep(0.05)
    model.script(text("Task a was cut off; I will rebuild it."))
    async with serving(settings) as (app, channel):
        chat = Chat(channel)
        events = await chat.until(
            "t1", lambda e: e["type"] == "text-block" and "cut off" in e["payload"]["text"]
        )
        plan = await app.parts.plans.get("t1")
    replan = model.requests[-1]["messages"][-1]["content"][0]["text"]
    assert 'type="replan"' in replan and "the server stopped while this task ran" in replan
    assert plan is not None and plan.task("a")["status"] == "failed"  # type: ignore[index]
    assert of_type(events, "run-finish")


async def test_a_background_agents_card_goes_with_the_agent(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    question = {"id": "q", "question": "Which?", "type": "text"}
    model.responder = lambda request: (
        tool("ask-user", {"questions": [question]}) if is_background(request) else None
    )
    model.script(tool("delegate", {"role": "eval-setup", "briefing": "ask first"}), text("ok"))
    async with serving(model_settings()) as (app, channel):
        chat = Chat(channel)
        await chat.finished("t1", await chat.send("t1", "go"))
        card = await chat.card("t1")
        [running] = (await chat.status("t1")).background_tasks
        await chat.agent.CancelTask(
            agent_pb2.CancelTaskRequest(thread_id="t1", task_id=running.task_id)
        )
        for _ in range(200):
            found = await app.parts.hitl.get(card["requestId"])
            if found.status != "pending":
                break
            await asyncio.sleep(0.05)
        assert found.status == "cancelled"
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await chat.confirm("t1", card["requestId"], kind="questions", answers=[])
        assert late.value.code() is grpc.StatusCode.FAILED_PRECONDITION
