"""The workspace tools, called as the agent will call them, against a real sandbox."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sandbox.errors import EditMismatchError, PathEscapeError
from server.app import Application
from server.settings import Settings
from server.tools.spec import ToolContext
from server.tools.workspace import TOOLS, WorkspaceTools

BY_NAME = {tool.name: tool for tool in TOOLS}
KNOWLEDGE_BASE = Path(__file__).resolve().parents[1] / "sandbox/image/seed/knowledge-base"


@pytest.fixture
async def ctx(
    make_docker_settings: Callable[..., Settings],
) -> AsyncIterator[ToolContext[WorkspaceTools]]:
    settings = make_docker_settings(sandbox_max_output_bytes=1024)
    async with Application(settings) as app:
        await app.parts.events.append("t1", "thread-created")
        # Exactly what the group is given: the thread's sandbox, nothing else.
        services = WorkspaceTools(sandbox_for=app.parts.sandboxes.for_thread)
        yield ToolContext(services=services, thread_id="t1")


async def call(ctx: ToolContext[WorkspaceTools], name: str, **arguments: Any) -> dict[str, Any]:
    tool = BY_NAME[name]
    result = await tool.handler(ctx, tool.input_model.model_validate(arguments))
    return result.model_dump(by_alias=True)


def test_the_tool_names_are_the_reference_ones() -> None:
    assert set(BY_NAME) == {
        "workspace_read_file",
        "workspace_write_file",
        "workspace_str_replace_file",
        "workspace_execute_command",
        "workspace_read_tool_result",
        "workspace_grep",
    }


async def test_write_edit_read(ctx: ToolContext[WorkspaceTools]) -> None:
    await call(ctx, "workspace_write_file", path="src/x.ts", content="a\nb\nb\nc\n")
    with pytest.raises(EditMismatchError, match="matches 2 places"):
        await call(ctx, "workspace_str_replace_file", path="src/x.ts", oldString="b", newString="B")
    edited = await call(
        ctx, "workspace_str_replace_file", path="src/x.ts", oldString="a", newString="A"
    )
    assert edited == {"path": "src/x.ts", "replacements": 1}
    read = await call(ctx, "workspace_read_file", path="src/x.ts", offset=2, limit=2)
    assert read == {"content": "b\nb\n", "totalLines": 4, "truncated": True}
    with pytest.raises(PathEscapeError):
        await call(ctx, "workspace_read_file", path="../../etc/passwd")


async def test_grep_searches_the_knowledge_base_as_the_image_ships_it(
    ctx: ToolContext[WorkspaceTools],
) -> None:
    pattern = r"pin(ned)? ?data|fixture"
    expected = sorted(
        (f"knowledge-base/{path.relative_to(KNOWLEDGE_BASE)}", number, line)
        for path in KNOWLEDGE_BASE.rglob("*.md")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(pattern, line, re.IGNORECASE)
    )
    assert expected, "the knowledge base should mention pinned data"
    found = await call(
        ctx,
        "workspace_grep",
        pattern=pattern,
        path="knowledge-base",
        glob="*.md",
        caseSensitive=False,
        maxMatches=1000,
    )
    got = sorted((m["path"], m["line"], m["text"]) for m in found["matches"])
    assert got == [(p, n, t[:400]) for p, n, t in expected]
    assert found["matchCount"] == len(expected) and not found["truncated"]
    assert found["fileCount"] == len({p for p, _, _ in expected})
    first = found["matches"][0]
    assert f"{first['path']}:{first['line']}:{first['text']}" in found["content"].splitlines()
    # Case matters unless told otherwise; context lines come marked with '-' and groups split.
    upper = await call(ctx, "workspace_grep", pattern="PIN", path="knowledge-base")
    assert all("PIN" in m["text"] for m in upper["matches"])
    text = "one\ntwo\nthree\nfour\n" * 3
    await call(ctx, "workspace_write_file", path="notes/a.txt", content=text)
    around = await call(ctx, "workspace_grep", pattern="^two$", path="notes", contextLines=1)
    assert around["content"].split("\n--\n")[0] == "\n".join(
        ["notes/a.txt-1-one", "notes/a.txt:2:two", "notes/a.txt-3-three"]
    )
    assert around["matchCount"] == 3 and len(around["content"].split("\n--\n")) == 3
    with pytest.raises(ValidationError):
        BY_NAME["workspace_grep"].input_model.model_validate({"pattern": "", "path": "."})


async def test_execute_command_returns_the_reference_shape(
    ctx: ToolContext[WorkspaceTools],
) -> None:
    result = await call(ctx, "workspace_execute_command", command="echo hi; echo no >&2; exit 2")
    assert {k: result[k] for k in ("success", "exitCode", "stdout", "stderr", "timedOut")} == {
        "success": False,
        "exitCode": 2,
        "stdout": "hi\n",
        "stderr": "no\n",
        "timedOut": False,
    }
    assert result["executionTimeMs"] >= 0 and result["fullOutputPath"] is None
    timed = await call(ctx, "workspace_execute_command", command="sleep 20", timeout=1000)
    assert timed["timedOut"] and not timed["success"]


async def test_cut_json_output_is_read_back_through_the_result_tool(
    ctx: ToolContext[WorkspaceTools],
) -> None:
    command = (
        'node -e "console.log(JSON.stringify({rows: Array.from({length: 300}, (_, i) => ({i}))}))"'
    )
    result = await call(ctx, "workspace_execute_command", command=command)
    assert result["success"] and len(result["stdout"]) == 1024 and result["fullOutputPath"]
    shape = json.loads(
        (
            await call(
                ctx, "workspace_read_tool_result", path=result["fullOutputPath"], view="describe"
            )
        )["content"]
    )
    assert shape["json"]["keys"]["rows"]["length"] == 300
    page = await call(
        ctx,
        "workspace_read_tool_result",
        path=result["fullOutputPath"],
        view="json",
        pointer="/rows",
        offset=290,
        limit=100,
    )
    assert json.loads(page["content"]) == [{"i": i} for i in range(290, 300)]
    assert page["total"] == 300 and page["nextOffset"] is None


def test_inputs_are_validated_against_the_reference_limits() -> None:
    tool = BY_NAME["workspace_read_tool_result"]
    with pytest.raises(ValidationError):
        tool.input_model.model_validate({"path": "p", "limit": 101})
    with pytest.raises(ValidationError):
        tool.input_model.model_validate({"path": "p", "maxChars": 20_001})
    with pytest.raises(ValidationError):
        BY_NAME["workspace_execute_command"].input_model.model_validate(
            {"command": "x", "bogus": 1}
        )
