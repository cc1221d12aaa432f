"""Per-thread sandboxes: hardened containers on a container engine (Docker; or, without
isolation, local directories), their image, the in-sandbox worker, and the commands and
files inside.

Usable on its own: nothing here imports the server.

    engine = DockerEngine.connect()
    provider = SandboxProvider(engine, image=engine.require_image(), owner="me")
    manager = SandboxManager(provider)
    result = await manager.run_command("thread-1", "ls", timeout_s=30)
"""

from sandbox.commands import CommandResult, CommandRunner
from sandbox.docker_engine import DockerEngine
from sandbox.engine import (
    ContainerEngine,
    ContainerGoneError,
    ContainerInfo,
    ContainerSpec,
    SandboxLimits,
)
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
from sandbox.local_engine import LocalEngine
from sandbox.manager import SandboxManager
from sandbox.protocol import Sandboxes
from sandbox.provider import SandboxInfo, SandboxProvider, remove_owner
from sandbox.results import ResultViewError, ResultWindow, render
from sandbox.workspace_disk import WorkspaceDisks

__all__ = [
    "BuiltImage",
    "CommandResult",
    "CommandRunner",
    "ContainerEngine",
    "ContainerGoneError",
    "ContainerInfo",
    "ContainerSpec",
    "DockerEngine",
    "EditMismatchError",
    "FileEntry",
    "FileTooLargeError",
    "ImageBuildError",
    "ImageBuilder",
    "LocalEngine",
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
    "SandboxProvider",
    "SandboxUnavailableError",
    "Sandboxes",
    "WorkspaceDisks",
    "WorkspaceFileNotFoundError",
    "WorkspaceFullError",
    "image_tags",
    "remove_owner",
    "render",
    "require_image",
]
