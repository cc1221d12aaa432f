"""The surface every sandbox backend offers the service (Docker manager, local directories)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from sandbox.commands import CommandResult, OutputCallback
from sandbox.files import FileEntry
from sandbox.search import GrepQuery, GrepResult
from sandbox.streams import ProcessStream
from sandbox.toolchain_results import (
    Compiled,
    Diagnosed,
    NodeDefinition,
    NodeResources,
    NodeTypeWritten,
    ResolvedParameters,
    RunReport,
    WorkflowCode,
)

__all__ = ["BrowserHost", "Sandboxes", "ToolchainHost", "WorkflowToolchain"]


class Sandboxes(Protocol):
    async def read_file(self, thread_id: str, path: str) -> bytes: ...

    async def read_result(self, thread_id: str, path: str) -> bytes: ...

    async def write_file(self, thread_id: str, path: str, data: bytes) -> int: ...

    async def str_replace(
        self, thread_id: str, path: str, old: str, new: str, *, replace_all: bool = False
    ) -> int: ...

    async def list_files(
        self, thread_id: str, path: str = ".", *, recursive: bool = False
    ) -> tuple[list[FileEntry], bool]: ...

    async def grep(self, thread_id: str, query: GrepQuery) -> GrepResult:
        """Search the workspace's text files (see search.py)."""
        ...

    async def run_command(
        self,
        thread_id: str,
        command: str,
        *,
        timeout_s: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> CommandResult:
        """`cwd` is relative to the workspace (None: the workspace itself)."""
        ...

    async def destroy(self, thread_id: str) -> bool: ...

    async def sweep_idle(self) -> list[str]: ...

    async def close(self) -> None: ...


@runtime_checkable
class ToolchainHost(Protocol):
    """Sandboxes with the SDK toolchain and the n8n engine in them (where `runs_image`: the
    image's sandboxes, not local ones)."""

    @property
    def runs_image(self) -> bool: ...

    def toolchain(self, thread_id: str) -> WorkflowToolchain: ...


class WorkflowToolchain(Protocol):
    """The SDK toolchain and the n8n engine in one thread's sandbox (sandbox/toolchain.py)."""

    async def compile(
        self, path: str, *, timeout_s: float = 5.0, max_bytes: int | None = None
    ) -> Compiled: ...

    async def diagnose(self, path: str, *, timeout_s: float = 5.0) -> Diagnosed: ...

    async def workflow_to_code(
        self, workflow: dict[str, Any], *, timeout_s: float = 5.0
    ) -> WorkflowCode: ...

    async def node_definition(
        self,
        node_type: str,
        version: float,
        *,
        resource: str | None = None,
        operation: str | None = None,
        mode: str | None = None,
    ) -> NodeDefinition: ...

    async def materialize_node_type(
        self,
        node_type: str,
        version: float,
        *,
        description: dict[str, Any] | None = None,
        resource: str | None = None,
        operation: str | None = None,
        mode: str | None = None,
    ) -> NodeTypeWritten: ...

    async def execute(
        self,
        workflow: dict[str, Any],
        *,
        execution_id: str,
        pin_data: dict[str, list[Any]] | None = None,
        start_node: str | None = None,
        timeout_s: float = 300.0,
        credentials: dict[str, dict[str, Any]] | None = None,
    ) -> RunReport: ...

    async def cancel_execution(self, execution_id: str) -> None: ...

    async def node_resources(
        self,
        node: dict[str, Any],
        *,
        lookup: str,
        method: str,
        credentials: dict[str, dict[str, Any]],
        filter_text: str | None = None,
        pagination_token: str | None = None,
        timeout_s: float = 30.0,
    ) -> NodeResources: ...

    async def resolve_parameters(
        self,
        workflow: dict[str, Any],
        *,
        nodes: dict[str, Any],
        node_name: str,
        execution_id: str,
        mode: str = "manual",
        run_index: int | None = None,
        item_index: int = 0,
        timeout_s: float = 30.0,
    ) -> ResolvedParameters: ...

    async def output_schema(
        self,
        node_type: str,
        version: float,
        *,
        resource: str | None = None,
        operation: str | None = None,
    ) -> dict[str, Any] | None: ...


@runtime_checkable
class BrowserHost(Protocol):
    """Sandboxes that can run a headless browser (where `runs_image`)."""

    @property
    def runs_image(self) -> bool: ...

    async def open_browser(self, thread_id: str) -> ProcessStream: ...
