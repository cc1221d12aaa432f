"""Skills and tools loaded on demand, through the real agent loop and the Messages API
stand-in: the first request offers the core, search_tools finds the rest, load_tool adds a
tool for the rest of the thread (across a restart), load_skill brings a skill's text in."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from instance_ai.v1 import tools_pb2
from server.settings import Settings
from server.tools.loading import CORE_TOOLS
from server.tools.skills import SkillLibrary
from tests.agent_fixtures import Chat, Event, last_tool_results, model, model_settings, of_type
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool

__all__ = ["model", "model_settings"]  # fixtures, shared


async def one_message(settings: Settings, message: str) -> list[Event]:
    """A server for one message: its run's events."""
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        return await chat.finished("t1", await chat.send("t1", message))


def offered(request: dict[str, object]) -> set[str]:
    return {t["name"] for t in request["tools"]}  # type: ignore[attr-defined]


async def test_the_core_comes_first_and_a_found_tool_stays_loaded_across_a_restart(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    settings = model_settings(agent_deferred_tools=True)
    model.script(
        tool("search_tools", {"query": "insert rows into a data table"}),
        tool("load_tool", {"toolName": "insert-data-table-rows"}),
        text("Ready to insert."),
        text("Still here."),
    )
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        await chat.finished("t1", await chat.send("t1", "add rows to my table"))
        listed = {t.name for t in (await chat.tools.ListTools(tools_pb2.ListToolsRequest())).tools}
    first, after_search, after_load = model.requests[0], model.requests[1], model.requests[2]
    assert offered(first) <= CORE_TOOLS
    assert {"load_skill", "search_tools", "load_tool", "build-workflow"} <= offered(first)
    assert "insert-data-table-rows" not in offered(first)
    assert not any(name.startswith("browser_") for name in offered(first))
    assert len(offered(first)) < len(listed) / 2  # ListTools still lists everything
    found = json.loads(last_tool_results(after_search)[0]["content"])["results"]
    assert found[0] == {
        "name": "insert-data-table-rows",
        "description": found[0]["description"],
        "loaded": False,
    }
    assert json.loads(last_tool_results(after_load)[0]["content"])["status"] == "loaded"
    assert "insert-data-table-rows" in offered(after_load)

    async with serving(settings) as (_app, channel):  # the same state, a new process
        chat = Chat(channel)
        await chat.finished("t1", await chat.send("t1", "and now?"))
    assert "insert-data-table-rows" in offered(model.requests[3])
    assert model.rejected == []


async def test_a_tool_called_before_it_is_loaded_is_a_correctable_error(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(
        tool("delete-data-table", {"dataTableId": "dt-1"}),
        tool("load_tool", {"toolName": "no-such-tool"}),
        text("Understood."),
    )
    events = await one_message(model_settings(agent_deferred_tools=True), "drop the table")
    refused = last_tool_results(model.requests[1])[0]
    assert refused["is_error"]
    assert "delete-data-table is not loaded: call load_tool" in refused["content"]
    assert of_type(events, "tool-error")[0]["toolCallId"]
    missing = json.loads(last_tool_results(model.requests[2])[0]["content"])
    assert missing["status"] == "not_found" and missing["candidates"]


async def test_a_skill_is_listed_in_the_prompt_and_its_text_comes_with_load_skill(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    planning = SkillLibrary().get("planning")
    assert planning is not None
    tables = SkillLibrary().get("data-table-manager")
    assert tables is not None and tables.linked  # a skill with reference files
    reference = tables.linked[0]
    model.script(
        tool("load_skill", {"name": "planning"}),
        tool("load_skill", {"name": "plans"}),
        tool("load_skill", {"skillId": "data-table-manager"}),
        tool("load_skill", {"name": "data-table-manager", "filePath": reference.path}),
        tool("load_skill", {"name": "data-table-manager", "filePath": "references/nope.md"}),
        tool("load_skill", {}),
        text("Planned."),
    )
    await one_message(model_settings(agent_deferred_tools=True), "three linked workflows")
    system = model.requests[0]["system"]
    assert f"- planning: {planning.description}" in system
    assert planning.content not in system  # only when loaded
    loaded = json.loads(last_tool_results(model.requests[1])[0]["content"])
    assert loaded["content"] == planning.content and loaded["success"]
    assert loaded["skillId"] == "planning" and loaded["hash"] == planning.hash
    unknown = last_tool_results(model.requests[2])[0]
    assert unknown["is_error"] and "there is no skill 'plans'" in unknown["content"]
    assert "workflow-builder" in unknown["content"]
    # The main text lists the skill's linked files; each comes in by its path.
    main = json.loads(last_tool_results(model.requests[3])[0]["content"])
    listed = main["linkedFiles"]["references"]
    assert {"path": reference.path, "bytes": reference.bytes, "sha256": reference.sha256} in listed
    linked = json.loads(last_tool_results(model.requests[4])[0]["content"])
    assert linked["filePath"] == reference.path and linked["content"] == reference.content
    assert linked["sha256"] == reference.sha256 and "linkedFiles" not in linked
    missing = last_tool_results(model.requests[5])[0]
    assert missing["is_error"] and reference.path in missing["content"]
    assert "omit filePath" in missing["content"]
    nameless = last_tool_results(model.requests[6])[0]
    assert nameless["is_error"] and "either skillId or name is required" in nameless["content"]


# Words that read as tool names (a verb, then what it acts on).
TOOL_LIKE = re.compile(
    r"(?<![\w-])(?:(?:list|get|create|delete|update|search|build|verify|report|setup|apply|test|insert|"
    r"run|load|debug)-[a-z-]+[a-z]|(?:workspace|browser|load|search)_[a-z_]+[a-z])(?![\w-])"
)


ANCHOR = re.compile(r"\]\(#[^)]*\)")
NOT_TOOLS = {"setup-items", "setup-panel-execute", "run-start", "run-finish"}


def test_the_skills_ship_and_name_only_tools_that_exist() -> None:
    from server.wiring import ALL_TOOLS

    names = {spec.name for spec in ALL_TOOLS}
    library = SkillLibrary()
    assert {s.name for s in library.catalog()} >= {
        "workflow-builder",
        "post-build-flow",
        "planning",
        "data-table-manager",
        "debugging-executions",
        "credential-setup-with-computer-use",
    }
    skills = {s.name for s in library.catalog()}
    for skill in library.catalog():
        texts = [skill.content, *(f.content for f in skill.linked)]
        # Not tool names: a link's in-page anchor, and n8n's event types and message contexts.
        words = {w for t in texts for w in TOOL_LIKE.findall(ANCHOR.sub("", t))}
        mentioned = words - skills - NOT_TOOLS
        assert mentioned, f"{skill.name} names no tool"
        assert mentioned <= names, (
            f"{skill.name} names tools that do not exist: {mentioned - names}"
        )
    assert names >= CORE_TOOLS


# The reference's skills (`@n8n/instance-ai` 1.26.1, its `skills/` directory).
REFERENCE_SKILLS = {
    "agent-builder",
    "config-evals",
    "credential-recipe-research",
    "credential-setup-with-computer-use",
    "data-table-manager",
    "debugging-executions",
    "instance-awareness",
    "intent-recognition",
    "model-selection",
    "n8n-docs-assistant",
    "one-off-operations",
    "planned-task-runtime",
    "planning",
    "post-build-flow",
    "progressive-building",
    "workflow-builder",
}
COVERAGE = Path(__file__).resolve().parent.parent / "docs" / "skills-coverage"
MODULE = re.compile(r"`?((?:server|sandbox|n8n_bridge|browser_relay)/[\w/.-]+\.(?:py|mjs|cjs))`?")


def test_every_reference_skill_is_ours_with_a_coverage_table_naming_real_code() -> None:
    """Each reference skill has ours, and a table mapping every rule to where ours states it;
    a rule said to be enforced in code names a module that exists."""
    library = SkillLibrary()
    assert set(library.names()) == REFERENCE_SKILLS
    root = COVERAGE.parent.parent
    for name in sorted(REFERENCE_SKILLS | {"system-prompt"}):
        table = (COVERAGE / f"{name}.md").read_text()
        rows = [line for line in table.splitlines() if re.match(r"\| *\d+ *\|", line)]
        assert rows, f"{name}: no numbered rules"
        assert re.search(r"rules: \d+, all covered\.", table), name
        for row in rows:
            enforced = row.rstrip(" |").rsplit("|", 1)[-1]
            for module in MODULE.findall(enforced):
                assert (root / module).exists(), f"{name}: {module} does not exist ({row[:60]})"
