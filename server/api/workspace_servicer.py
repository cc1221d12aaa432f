"""The Workspace service: a thread's sandbox files and commands.

A file API under the tools (as the sandbox service API is), not tool calls: its operations
are not recorded in the thread's log. What it shares with the workspace tools it takes from
them (the reading window and its default, a command's longest deadline); Exec streams a
command's output as it comes, which a tool call cannot."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from instance_ai.v1 import workspace_pb2, workspace_pb2_grpc
from sandbox.protocol import Sandboxes
from sandbox.results import MAX_CHARS, MAX_ITEMS, View, render
from server.core.validation import check_thread_id
from server.errors import InvalidArgumentError
from server.tools.spec import SandboxFor
from server.tools.workspace import DEFAULT_LINES, MAX_COMMAND_TIMEOUT_MS, line_window

__all__ = ["VIEWS", "WorkspaceServicer"]

VIEWS: dict[str, View] = {"text": "text", "describe": "describe", "json": "json"}


class WorkspaceServicer(workspace_pb2_grpc.WorkspaceServicer):
    def __init__(self, sandbox_for: SandboxFor) -> None:
        self._sandbox_for = sandbox_for

    async def _manager(self, thread_id: str) -> Sandboxes:
        check_thread_id(thread_id)
        return await self._sandbox_for(thread_id)

    async def ReadFile(
        self, request: workspace_pb2.ReadFileRequest, context: grpc.aio.ServicerContext
    ) -> workspace_pb2.ReadFileResponse:
        if request.start_line < 0 or request.max_lines < 0:
            raise InvalidArgumentError("start_line and max_lines must be 0 or more")
        manager = await self._manager(request.thread_id)
        data = await manager.read_file(request.thread_id, request.path)
        # 0 is proto's unset: the tool's own defaults.
        window = line_window(
            data, offset=request.start_line or 1, limit=request.max_lines or DEFAULT_LINES
        )
        return workspace_pb2.ReadFileResponse(
            content=window.content, total_lines=window.total_lines, truncated=window.truncated
        )

    async def WriteFile(
        self, request: workspace_pb2.WriteFileRequest, context: grpc.aio.ServicerContext
    ) -> workspace_pb2.WriteFileResponse:
        manager = await self._manager(request.thread_id)
        written = await manager.write_file(
            request.thread_id, request.path, request.content.encode()
        )
        return workspace_pb2.WriteFileResponse(bytes_written=written)

    async def StrReplace(
        self, request: workspace_pb2.StrReplaceRequest, context: grpc.aio.ServicerContext
    ) -> workspace_pb2.StrReplaceResponse:
        manager = await self._manager(request.thread_id)
        count = await manager.str_replace(
            request.thread_id,
            request.path,
            request.old_str,
            request.new_str,
            replace_all=request.replace_all,
        )
        return workspace_pb2.StrReplaceResponse(replacements=count)

    async def ListFiles(
        self, request: workspace_pb2.ListFilesRequest, context: grpc.aio.ServicerContext
    ) -> workspace_pb2.ListFilesResponse:
        manager = await self._manager(request.thread_id)
        entries, truncated = await manager.list_files(
            request.thread_id, request.path or ".", recursive=request.recursive
        )
        return workspace_pb2.ListFilesResponse(
            entries=[
                workspace_pb2.FileEntry(path=e.path, type=e.type, size=e.size) for e in entries
            ],
            truncated=truncated,
        )

    async def Exec(
        self, request: workspace_pb2.ExecRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[workspace_pb2.ExecResponse]:
        if not request.command.strip():
            raise InvalidArgumentError("command is empty: give a shell command to run")
        if not 0 <= request.timeout_ms <= MAX_COMMAND_TIMEOUT_MS:
            limit = MAX_COMMAND_TIMEOUT_MS
            raise InvalidArgumentError(f"timeout_ms must be 0 (default) to {limit}")
        manager = await self._manager(request.thread_id)
        loop = asyncio.get_running_loop()
        output: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

        def forward(stream: str, data: bytes) -> None:  # called from the runner's thread
            loop.call_soon_threadsafe(output.put_nowait, (stream, data))

        run = asyncio.create_task(
            manager.run_command(
                request.thread_id,
                request.command,
                timeout_s=request.timeout_ms / 1000 if request.timeout_ms else None,
                cwd=request.cwd or None,
                env=dict(request.env),
                on_output=forward,
            )
        )
        try:
            while not (run.done() and output.empty()):
                getter = asyncio.ensure_future(output.get())
                await asyncio.wait({getter, run}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                stream, data = getter.result()
                chunk = workspace_pb2.OutputChunk(data=data)
                if stream == "stdout":
                    yield workspace_pb2.ExecResponse(stdout=chunk)
                else:
                    yield workspace_pb2.ExecResponse(stderr=chunk)
            result = run.result()
        finally:
            if not run.done():  # the caller went away: kill the command's tree
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await run
        yield workspace_pb2.ExecResponse(
            exit=workspace_pb2.ExitStatus(
                exit_code=result.exit_code,
                timed_out=result.timed_out,
                result_id=result.full_output_path or "",
                duration_ms=result.duration_ms,
            )
        )

    async def ReadToolResult(
        self, request: workspace_pb2.ReadToolResultRequest, context: grpc.aio.ServicerContext
    ) -> workspace_pb2.ReadToolResultResponse:
        view = VIEWS.get(request.view or "text")
        if view is None:
            raise InvalidArgumentError(
                f"view {request.view!r} is unknown: use one of {', '.join(VIEWS)}"
            )
        manager = await self._manager(request.thread_id)
        stored = await manager.read_result(request.thread_id, request.path)
        window = render(
            stored.decode(errors="replace"),
            view=view,
            pointer=request.pointer,
            offset=request.offset,
            max_chars=request.max_chars or MAX_CHARS,
            limit=request.limit or MAX_ITEMS,
        )
        response = workspace_pb2.ReadToolResultResponse(content=window.content, total=window.total)
        if window.next_offset is not None:
            response.next_offset = window.next_offset
        return response
