"""Workspace tools: files and commands in the thread's sandbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from sandbox.protocol import Sandboxes
from sandbox.results import MAX_CHARS, MAX_ITEMS, View, render
from server.tools.spec import SandboxFor, ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "WorkspaceTools"]

DEFAULT_LINES = 2000


async def _manager(ctx: ToolContext[WorkspaceTools]) -> Sandboxes:
    return await ctx.services.sandbox_for(ctx.thread_id)


@dataclass(frozen=True, kw_only=True)
class WorkspaceTools:
    """What the workspace tools may touch: the thread's sandbox."""

    sandbox_for: SandboxFor


class ReadFileInput(ToolModel):
    path: str = Field(description="Workspace path, e.g. src/main.workflow.ts")
    offset: int = Field(1, ge=1, description="First line to return (1-based)")
    limit: int = Field(DEFAULT_LINES, ge=1, le=10_000, description="Lines to return at most")


class ReadFileOutput(ToolModel):
    content: str
    total_lines: int = Field(alias="totalLines")
    truncated: bool


async def read_file(ctx: ToolContext[WorkspaceTools], args: ReadFileInput) -> ReadFileOutput:
    data = await (await _manager(ctx)).read_file(ctx.thread_id, args.path)
    lines = data.decode(errors="replace").splitlines(keepends=True)
    window = lines[args.offset - 1 : args.offset - 1 + args.limit]
    return ReadFileOutput(
        content="".join(window),
        total_lines=len(lines),
        truncated=args.offset - 1 + args.limit < len(lines),
    )


class WriteFileInput(ToolModel):
    path: str = Field(description="Workspace path; parent folders are created")
    content: str


class WriteFileOutput(ToolModel):
    path: str
    bytes_written: int = Field(alias="bytesWritten")


async def write_file(ctx: ToolContext[WorkspaceTools], args: WriteFileInput) -> WriteFileOutput:
    written = await (await _manager(ctx)).write_file(
        ctx.thread_id, args.path, args.content.encode()
    )
    return WriteFileOutput(path=args.path, bytes_written=written)


class StrReplaceInput(ToolModel):
    path: str
    old_string: str = Field(
        alias="oldString", description="Exact text to replace; must match exactly once"
    )
    new_string: str = Field(alias="newString", description="The text to put in its place")
    replace_all: bool = Field(
        False, alias="replaceAll", description="Replace every match instead of one"
    )


class StrReplaceOutput(ToolModel):
    path: str
    replacements: int


async def str_replace_file(
    ctx: ToolContext[WorkspaceTools], args: StrReplaceInput
) -> StrReplaceOutput:
    count = await (await _manager(ctx)).str_replace(
        ctx.thread_id, args.path, args.old_string, args.new_string, replace_all=args.replace_all
    )
    return StrReplaceOutput(path=args.path, replacements=count)


class ExecuteCommandInput(ToolModel):
    command: str = Field(min_length=1, description="Shell command, run with sh -c")
    timeout: int | None = Field(
        None, ge=1_000, le=3_600_000, description="Deadline in ms (default 300000)"
    )
    cwd: str | None = Field(None, description="Working directory, relative to the workspace")


class ExecuteCommandOutput(ToolModel):
    success: bool
    exit_code: int = Field(alias="exitCode")
    stdout: str
    stderr: str
    execution_time_ms: int = Field(alias="executionTimeMs")
    timed_out: bool = Field(alias="timedOut")
    full_output_path: str | None = Field(
        None, alias="fullOutputPath", description="Where the cut output is kept in full"
    )


async def execute_command(
    ctx: ToolContext[WorkspaceTools], args: ExecuteCommandInput
) -> ExecuteCommandOutput:
    result = await (await _manager(ctx)).run_command(
        ctx.thread_id,
        args.command,
        timeout_s=args.timeout / 1000 if args.timeout else None,
        cwd=args.cwd,
    )
    return ExecuteCommandOutput(
        success=result.success,
        exit_code=result.exit_code,
        stdout=result.stdout,
        stderr=result.stderr,
        execution_time_ms=result.duration_ms,
        timed_out=result.timed_out,
        full_output_path=result.full_output_path,
    )


class ReadToolResultInput(ToolModel):
    path: str = Field(description="Path of the stored result (fullOutputPath)")
    view: View = Field("text", description="text, describe (structure) or json (at pointer)")
    pointer: str = Field("", description="RFC 6901 pointer for the json view, e.g. /data/0")
    offset: int = Field(0, ge=0)
    max_chars: int = Field(MAX_CHARS, ge=1, le=MAX_CHARS, alias="maxChars")
    limit: int = Field(MAX_ITEMS, ge=1, le=MAX_ITEMS, description="Array items (json view)")


class ReadToolResultOutput(ToolModel):
    content: str
    total: int
    next_offset: int | None = Field(None, alias="nextOffset")


async def read_tool_result(
    ctx: ToolContext[WorkspaceTools], args: ReadToolResultInput
) -> ReadToolResultOutput:
    stored = await (await _manager(ctx)).read_result(ctx.thread_id, args.path)
    window = render(
        stored.decode(errors="replace"),
        view=args.view,
        pointer=args.pointer,
        offset=args.offset,
        max_chars=args.max_chars,
        limit=args.limit,
    )
    return ReadToolResultOutput(
        content=window.content, total=window.total, next_offset=window.next_offset
    )


GROUP = "workspace"
TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="workspace_read_file",
        description="Read a text file from the workspace, by lines.",
        group=GROUP,
        services=WorkspaceTools,
        input_model=ReadFileInput,
        output_model=ReadFileOutput,
        handler=read_file,
    ),
    ToolSpec(
        name="workspace_write_file",
        description="Create or replace a workspace file.",
        group=GROUP,
        services=WorkspaceTools,
        input_model=WriteFileInput,
        output_model=WriteFileOutput,
        handler=write_file,
    ),
    ToolSpec(
        name="workspace_str_replace_file",
        description="Replace exact text in a workspace file (must match once unless replaceAll).",
        group=GROUP,
        services=WorkspaceTools,
        input_model=StrReplaceInput,
        output_model=StrReplaceOutput,
        handler=str_replace_file,
    ),
    ToolSpec(
        name="workspace_execute_command",
        description="Run a shell command in the sandbox under a deadline; output is capped and "
        "kept in full at fullOutputPath when cut.",
        group=GROUP,
        services=WorkspaceTools,
        input_model=ExecuteCommandInput,
        output_model=ExecuteCommandOutput,
        handler=execute_command,
    ),
    ToolSpec(
        name="workspace_read_tool_result",
        description="Page through a stored result: view 'describe' first to see its structure, "
        "then 'json' with a pointer, or 'text' by character offset.",
        group=GROUP,
        services=WorkspaceTools,
        input_model=ReadToolResultInput,
        output_model=ReadToolResultOutput,
        handler=read_tool_result,
    ),
]
