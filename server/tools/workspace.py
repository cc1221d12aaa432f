"""Workspace tools: files and commands in the thread's sandbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from sandbox.protocol import Sandboxes
from sandbox.results import MAX_CHARS, MAX_ITEMS, View, render
from sandbox.search import GrepQuery
from server.tools.spec import SandboxFor, ToolContext, ToolModel, ToolSpec

__all__ = [
    "DEFAULT_LINES",
    "GROUP",
    "MAX_COMMAND_TIMEOUT_MS",
    "TOOLS",
    "WorkspaceTools",
    "line_window",
]

DEFAULT_LINES = 2000
# A command's longest deadline, for the tool and the Workspace service's Exec alike.
MAX_COMMAND_TIMEOUT_MS = 3_600_000


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
    return line_window(data, offset=args.offset, limit=args.limit)


def line_window(data: bytes, *, offset: int = 1, limit: int = DEFAULT_LINES) -> ReadFileOutput:
    """`limit` lines of a file from line `offset` (1-based), and whether more follow: the
    reading window of the tool and of the Workspace service alike."""
    lines = data.decode(errors="replace").splitlines(keepends=True)
    window = lines[offset - 1 : offset - 1 + limit]
    return ReadFileOutput(
        content="".join(window), total_lines=len(lines), truncated=offset - 1 + limit < len(lines)
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


class GrepInput(ToolModel):
    pattern: str = Field(
        min_length=1,
        max_length=1000,
        description="Perl-compatible regular expression, e.g. 'httpRequest|webhook'",
    )
    path: str = Field(".", description="Folder or file to search, relative to the workspace")
    glob: str | None = Field(
        None, max_length=200, description="Only files whose name matches, e.g. '*.ts' or '*.md'"
    )
    case_sensitive: bool = Field(True, alias="caseSensitive")
    context_lines: int = Field(
        0, ge=0, le=10, alias="contextLines", description="Lines shown before and after a match"
    )
    max_matches: int = Field(100, ge=1, le=1000, alias="maxMatches")


class GrepMatch(ToolModel):
    path: str
    line: int
    text: str


class GrepOutput(ToolModel):
    content: str = Field(
        description="grep-style lines: path:line:text for matches, path-line-text for context"
    )
    matches: list[GrepMatch]
    match_count: int = Field(alias="matchCount")
    file_count: int = Field(alias="fileCount")
    truncated: bool = Field(description="More matches exist: narrow the pattern, path or glob")


async def grep(ctx: ToolContext[WorkspaceTools], args: GrepInput) -> GrepOutput:
    result = await (await _manager(ctx)).grep(
        ctx.thread_id,
        GrepQuery(
            pattern=args.pattern,
            path=args.path,
            glob=args.glob,
            ignore_case=not args.case_sensitive,
            context_lines=args.context_lines,
            max_matches=args.max_matches,
        ),
    )
    lines, previous = [], None
    for found in result.lines:
        adjacent = previous is not None and (found.path, found.line - 1) == (
            previous.path,
            previous.line,
        )
        if args.context_lines and previous is not None and not adjacent:
            lines.append("--")
        mark = ":" if found.match else "-"
        lines.append(f"{found.path}{mark}{found.line}{mark}{found.text}")
        previous = found
    return GrepOutput(
        content="\n".join(lines),
        matches=[GrepMatch(path=f.path, line=f.line, text=f.text) for f in result.lines if f.match],
        match_count=result.matches,
        file_count=result.files,
        truncated=result.truncated,
    )


class ExecuteCommandInput(ToolModel):
    command: str = Field(min_length=1, description="Shell command, run with sh -c")
    timeout: int | None = Field(
        None, ge=1_000, le=MAX_COMMAND_TIMEOUT_MS, description="Deadline in ms (default 300000)"
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
        name="workspace_grep",
        description="Search workspace files (the knowledge base, sources, chunks) for a "
        "regular expression; binary files, .git and node_modules are skipped. Read what it "
        "finds with workspace_read_file.",
        group=GROUP,
        services=WorkspaceTools,
        input_model=GrepInput,
        output_model=GrepOutput,
        handler=grep,
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
