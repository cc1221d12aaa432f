"""The gateway's MCP server: the file tools of one root (read, list, search, info; write
only with --write), on the SDK's low-level server so it runs over any message streams."""

from __future__ import annotations

import json
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server
from pydantic import BaseModel, ConfigDict, Field

from fs_gateway.files import FileRoot

__all__ = ["gateway_server"]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadFile(_Input):
    path: str = Field(description="file path relative to the root")
    offset: int = Field(0, ge=0, description="first line to return (0-based)")
    limit: int = Field(2000, ge=1, le=10000, description="most lines to return")


class ListFiles(_Input):
    path: str = Field(".", description="directory relative to the root")
    recursive: bool = Field(False, description="also list subdirectories' entries")


class SearchFiles(_Input):
    pattern: str = Field(min_length=1, description="regular expression searched line by line")
    path: str = Field(".", description="directory to search, relative to the root")
    glob: str = Field("*", description="only files whose name matches, e.g. *.csv")


class FileInfo(_Input):
    path: str = Field(description="file or directory relative to the root")


class WriteFile(_Input):
    path: str = Field(description="file path relative to the root (parents are created)")
    content: str = Field(description="the whole new text of the file")


_READ_ONLY = types.ToolAnnotations(readOnlyHint=True, openWorldHint=False)
_WRITES = types.ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)


def gateway_server(files: FileRoot) -> Server[Any, Any]:
    """The MCP server of `files`; its tools' results are JSON text."""
    server: Server[Any, Any] = Server(
        "instance-ai-gateway",
        instructions=f"Files under {files.root} on the person's machine"
        + ("" if files.write else " (read-only)"),
    )
    tools: dict[str, tuple[type[_Input], str, types.ToolAnnotations]] = {
        "read_file": (ReadFile, "Read a text file under the root, by lines.", _READ_ONLY),
        "list_files": (ListFiles, "List a directory under the root.", _READ_ONLY),
        "search_files": (
            SearchFiles,
            "Search the text files under the root for lines matching a regular expression.",
            _READ_ONLY,
        ),
        "file_info": (FileInfo, "Type, size and modification time of a path.", _READ_ONLY),
    }
    if files.write:
        tools["write_file"] = (WriteFile, "Create or replace a text file under the root.", _WRITES)

    @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return [
            types.Tool(
                name=name,
                description=description,
                inputSchema=model.model_json_schema(),
                annotations=annotations,
            )
            for name, (model, description, annotations) in tools.items()
        ]

    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
        if name not in tools:
            raise ValueError(f"there is no tool {name!r} here")
        args = tools[name][0].model_validate(arguments)
        result = _run(files, args)
        return [types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))]

    return server


def _run(files: FileRoot, args: _Input) -> dict[str, Any]:
    if isinstance(args, ReadFile):
        return files.read(args.path, offset=args.offset, limit=args.limit)
    if isinstance(args, ListFiles):
        return files.list(args.path, recursive=args.recursive)
    if isinstance(args, SearchFiles):
        return files.search(args.pattern, path=args.path, glob=args.glob)
    if isinstance(args, FileInfo):
        return files.info(args.path)
    assert isinstance(args, WriteFile)
    return files.write_text(args.path, args.content)
