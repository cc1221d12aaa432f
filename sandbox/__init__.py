"""Per-thread sandboxes: hardened Docker containers (or, without isolation, local
directories), their image, the in-sandbox worker, and the commands and files inside.

Usable on its own: nothing here imports the server.

    client = connect()
    manager = SandboxManager(DockerProvider(client, image=require_image(client)))
    result = await manager.run_command("thread-1", "ls", timeout_s=30)
"""

from sandbox.commands import CommandResult, CommandRunner
from sandbox.docker_provider import DockerProvider, SandboxInfo, SandboxLimits, connect
from sandbox.errors import (
    EditMismatchError,
    FileTooLargeError,
    ImageBuildError,
    PathEscapeError,
    SandboxError,
    SandboxNotFoundError,
    SandboxOwnerInUseError,
    SandboxUnavailableError,
    WorkspaceFileNotFoundError,
    WorkspaceFullError,
)
from sandbox.files import FileEntry
from sandbox.image.build import BuiltImage, ImageBuilder, image_tags, require_image
from sandbox.lease import OwnerLease
from sandbox.local import LocalSandboxes
from sandbox.manager import SandboxManager
from sandbox.protocol import Sandboxes
from sandbox.results import ResultViewError, ResultWindow, render
from sandbox.workspace_disk import WorkspaceDisks

__all__ = [
    "BuiltImage",
    "CommandResult",
    "CommandRunner",
    "DockerProvider",
    "EditMismatchError",
    "FileEntry",
    "FileTooLargeError",
    "ImageBuildError",
    "ImageBuilder",
    "LocalSandboxes",
    "OwnerLease",
    "PathEscapeError",
    "ResultViewError",
    "ResultWindow",
    "SandboxError",
    "SandboxInfo",
    "SandboxLimits",
    "SandboxManager",
    "SandboxNotFoundError",
    "SandboxOwnerInUseError",
    "SandboxUnavailableError",
    "Sandboxes",
    "WorkspaceDisks",
    "WorkspaceFileNotFoundError",
    "WorkspaceFullError",
    "connect",
    "image_tags",
    "render",
    "require_image",
]
