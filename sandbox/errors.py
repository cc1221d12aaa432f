"""Errors of the sandbox package (usable without the server).

SandboxError
├── SandboxUnavailableError  the container engine cannot be reached or refused the call
├── SandboxNotFoundError     no sandbox for that thread (and none may be created)
├── SandboxOwnerInUseError   another live service holds this owner on the engine
├── ImageBuildError          the sandbox image could not be built
├── PathEscapeError          a path resolves outside the workspace
├── WorkspaceFileNotFoundError
├── FileTooLargeError        a write or read is over the configured cap
├── WorkspaceFullError       the workspace reached its size limit
├── EditMismatchError        str-replace found the old text zero or several times
├── InvalidPatternError      a search pattern grep cannot compile
└── FileOperationError       a service sandbox's file operation refused (`code` says why)
"""

from __future__ import annotations

__all__ = [
    "EditMismatchError",
    "FileOperationError",
    "FileTooLargeError",
    "ImageBuildError",
    "InvalidPatternError",
    "PathEscapeError",
    "SandboxError",
    "SandboxNotFoundError",
    "SandboxOwnerInUseError",
    "SandboxUnavailableError",
    "WorkspaceFileNotFoundError",
    "WorkspaceFullError",
]


class SandboxError(Exception):
    """Root of the sandbox package's errors."""


class SandboxUnavailableError(SandboxError):
    pass


class SandboxNotFoundError(SandboxError):
    pass


class ImageBuildError(SandboxError):
    pass


class PathEscapeError(SandboxError):
    pass


class WorkspaceFileNotFoundError(SandboxError):
    pass


class FileTooLargeError(SandboxError):
    pass


class EditMismatchError(SandboxError):
    pass


class SandboxOwnerInUseError(SandboxError):
    """Another live service holds this sandbox owner on the engine."""


class WorkspaceFullError(SandboxError):
    """The workspace's filesystem reached its size limit."""


class InvalidPatternError(SandboxError):
    """A workspace search pattern that is not a valid regular expression."""


class FileOperationError(SandboxError):
    """A file operation of a service sandbox the filesystem refused: `code` is one of
    exists, not_empty, is_dir, not_dir, invalid, denied (sandbox/image/bin/fsapi.mjs)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
