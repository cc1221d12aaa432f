"""Workflow runs on the real n8n engine inside a real sandbox: pin data, branches on real
expressions, the Code node, credentials that do not exist, and runs that must be stopped."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider
from sandbox.toolchain_results import Compiled

ROOT = Path(__file__).resolve().parents[1]


def node(name: str, type_: str, version: float, **parameters: Any) -> dict[str, Any]:
    return {
        "id": name,
        "name": name,
        "type": f"n8n-nodes-base.{type_}",
        "typeVersion": version,
        "position": [0, 0],
        "parameters": parameters,
    }


def chain(*nodes: dict[str, Any]) -> dict[str, Any]:
    """A workflow whose nodes run one after another, behind a manual trigger."""
    all_nodes = [node("Start", "manualTrigger", 1), *nodes]
    connections = {
        a["name"]: {"main": [[{"node": b["name"], "type": "main", "index": 0}]]}
        for a, b in itertools.pairwise(all_nodes)
    }
    return {"name": "test", "nodes": all_nodes, "connections": connections, "settings": {}}


def code(name: str, program: str) -> dict[str, Any]:
    return node(name, "code", 2, jsCode=program)


@pytest.fixture
async def manager(provider: SandboxProvider) -> Any:
    manager = SandboxManager(provider)
    yield manager
    await manager.close()


async def compiled(manager: SandboxManager, source: Path) -> Compiled:
    await manager.write_file("t1", f"src/{source.name}", await asyncio.to_thread(source.read_bytes))
    built = await manager.toolchain("t1").compile(f"src/{source.name}", timeout_s=20)
    assert built.ok, built
    return built


async def test_a_pinned_write_lets_its_downstream_run_on_the_fixture(
    manager: SandboxManager,
) -> None:
    built = await compiled(manager, ROOT / "examples/order-intake.workflow.ts")
    pins = {**built.fixtures, "Announce": [{"ok": True, "ts": "1700000000.1"}]}
    run = await manager.toolchain("t1").execute(built.workflow, execution_id="e1", pin_data=pins)
    assert run.status == "success", run
    assert run.order == ["Order Intake", "Prioritise", "Urgent?", "Announce"]
    prioritised = run.nodes["Prioritise"]["outputs"][0]["items"][0]
    assert prioritised["urgent"] is True and prioritised["orderId"] == "A-7"
    # The IF took its true branch on the real expression; the false branch got nothing.
    assert [o["count"] for o in run.nodes["Urgent?"]["outputs"]] == [1, 0]
    assert "Queue" not in run.nodes
    assert run.nodes["Announce"]["pinned"] and not run.nodes["Prioritise"]["pinned"]

    # Unpinned, the Slack node has no credentials to use: the run fails there, saying so.
    unpinned = await manager.toolchain("t1").execute(
        built.workflow, execution_id="e2", pin_data=built.fixtures
    )
    assert unpinned.status == "error"
    assert unpinned.error["node"] == "Announce"
    assert "credentials" in unpinned.nodes["Announce"]["error"]["message"]


async def test_switch_branches_and_the_code_node_run_for_real(manager: SandboxManager) -> None:
    built = await compiled(manager, ROOT / "tests/workflows/switch.workflow.ts")
    for priority, reached in [("high", "High"), ("normal", "Normal"), ("low", "Low")]:
        run = await manager.toolchain("t1").execute(
            built.workflow,
            execution_id=f"s-{priority}",
            pin_data={"Start": [{"priority": priority}]},
        )
        assert run.status == "success"
        assert set(run.order) == {"Start", "By Priority", reached}

    merged = await compiled(manager, ROOT / "tests/workflows/merge-code.workflow.ts")
    run = await manager.toolchain("t1").execute(merged.workflow, execution_id="m")
    assert run.status == "success", run
    assert run.nodes["Total"]["outputs"][0]["items"] == [{"total": 30}]


async def test_a_failing_code_node_is_named_and_logs_are_kept(manager: SandboxManager) -> None:
    run = await manager.toolchain("t1").execute(
        chain(
            code("Shape", "console.log('shaping', $input.all().length); return [{json: {n: 1}}];"),
            code("Explode", "throw new Error('amount is missing');"),
        ),
        execution_id="c",
    )
    assert run.status == "error"
    assert run.error["node"] == "Explode"
    assert "amount is missing" in run.nodes["Explode"]["error"]["message"]
    assert run.logs == ["log: shaping 1"]


async def test_a_code_node_may_return_its_input_objects_as_they_are(
    manager: SandboxManager,
) -> None:
    # `$input.first().json.list` hands back the engine's data proxies; returned unchanged they
    # must still come out as plain items (once, they could not leave the worker thread).
    run = await manager.toolchain("t1").execute(
        chain(
            code("Batch", "return [{json: {list: [{email: 'a@x'}, {email: 'b@x'}]}}];"),
            code("One Each", "return $input.first().json.list.map((json) => ({ json }));"),
            node("Per Item", "code", 2, mode="runOnceForEachItem", jsCode="return $input.item;"),
        ),
        execution_id="proxies",
    )
    assert run.status == "success", run
    assert run.nodes["One Each"]["outputs"][0]["items"] == [{"email": "a@x"}, {"email": "b@x"}]
    assert run.nodes["Per Item"]["outputs"][0]["items"] == [{"email": "a@x"}, {"email": "b@x"}]


async def test_runs_that_never_end_are_stopped_and_the_sandbox_keeps_serving(
    manager: SandboxManager,
) -> None:
    spin = await manager.toolchain("t1").execute(
        chain(code("Spin", "while (true) {}")), execution_id="a"
    )
    assert spin.status == "error"
    assert "timed out" in spin.nodes["Spin"]["error"]["message"]

    forever = chain(code("Forever", "for (;;) { await null; }"))
    stopped = await manager.toolchain("t1").execute(forever, execution_id="b", timeout_s=2)
    assert (stopped.ok, stopped.stage) == (False, "timeout")

    # It yields between allocations: the Code node's own 5 s limit holds only synchronous
    # code, and a loaded machine can take longer than that to fill the heap (seen in CI).
    hoarding = "const h = []; for (;;) { h.push(new Array(1e6).fill(1)); await null; }"
    hoard = chain(code("Hoard", hoarding))
    exhausted = await manager.toolchain("t1").execute(hoard, execution_id="c", timeout_s=60)
    assert (exhausted.ok, exhausted.stage) == (False, "run")
    assert "384 MB" in exhausted.message

    fine = chain(code("Fine", "return [{json: {}}];"))
    after = await manager.toolchain("t1").execute(fine, execution_id="d")
    assert after.status == "success"


async def test_a_run_can_be_cancelled_before_it_starts_and_mid_way(
    manager: SandboxManager,
) -> None:
    pause = chain(node("Pause", "wait", 1.1, amount=30, unit="seconds"))
    toolchain = manager.toolchain("t1")
    # Asked at once: the cancel may reach the sandbox before the run has started (its engine
    # still loading); it is kept for that run, which would otherwise wait its 30 s.
    early = asyncio.ensure_future(toolchain.execute(pause, execution_id="early", timeout_s=120))
    await toolchain.cancel_execution("early")
    assert (await asyncio.wait_for(early, 25)).status == "canceled"
    # Asked while it waits (the engine loaded now: the run is under way within the pause
    # below; were it not, the cancel would still be kept for it).
    later = asyncio.ensure_future(toolchain.execute(pause, execution_id="later", timeout_s=120))
    await asyncio.sleep(2)
    await toolchain.cancel_execution("later")
    assert (await asyncio.wait_for(later, 25)).status == "canceled"
    # A cancel that comes after its run ended stops nothing later.
    fine = chain(code("Fine", "return [{json: {}}];"))
    assert (await toolchain.execute(fine, execution_id="done")).status == "success"
    await toolchain.cancel_execution("done")
    assert (await toolchain.execute(fine, execution_id="done")).status == "success"


async def test_nodes_that_cannot_run_here_say_to_simulate_them(manager: SandboxManager) -> None:
    agent = {
        "id": "a",
        "name": "Agent",
        "type": "@n8n/n8n-nodes-langchain.agent",
        "typeVersion": 3.1,
        "position": [0, 0],
        "parameters": {},
    }
    run = await manager.toolchain("t1").execute(chain(agent), execution_id="x")
    assert run.status == "error"
    assert "simulate it" in run.error["message"]
    pinned = await manager.toolchain("t1").execute(
        chain(agent), execution_id="y", pin_data={"Agent": [{}]}
    )
    assert pinned.status == "success"
    # An AI workflow with its trigger and agent simulated runs; the sub-nodes never do.
    built = await compiled(manager, ROOT / "tests/workflows/ai-agent.workflow.ts")
    pins = {"Chat": [{"chatInput": "where is order A-7?"}], "Assistant": [{"output": "shipped"}]}
    ai = await manager.toolchain("t1").execute(built.workflow, execution_id="z", pin_data=pins)
    assert ai.status == "success" and ai.order == ["Chat", "Assistant"]


async def test_output_schemas_shipped_with_the_nodes(manager: SandboxManager) -> None:
    post = await manager.toolchain("t1").output_schema(
        "n8n-nodes-base.slack", 2.5, resource="message", operation="post"
    )
    assert post is not None and "channel" in post["properties"]
    webhook = await manager.toolchain("t1").output_schema("n8n-nodes-base.webhook", 2.1)
    assert webhook is not None and "body" in webhook["properties"]
    assert await manager.toolchain("t1").output_schema("n8n-nodes-base.noOp", 1) is None
    assert await manager.toolchain("t1").output_schema("@n8n/n8n-nodes-langchain.agent", 3) is None
    assert (
        await manager.toolchain("t1").output_schema(
            "n8n-nodes-base.slack", 2.3, resource="../../etc", operation="passwd"
        )
        is None
    )
