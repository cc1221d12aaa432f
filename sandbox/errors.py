"""Errors of the sandbox package (usable without the server).

SandboxError
├── SandboxUnavailableError  the container engine cannot be reached or refused the call
└── ImageBuildError          the sandbox image could not be built
"""

from __future__ import annotations

__all__ = ["ImageBuildError", "SandboxError", "SandboxUnavailableError"]


class SandboxError(Exception):
    """Root of the sandbox package's errors."""


class SandboxUnavailableError(SandboxError):
    pass


class ImageBuildError(SandboxError):
    pass
