"""The layering of docs/architecture.md, checked: sandbox/ and browser_relay/ stand alone."""

from __future__ import annotations

import subprocess
import sys

import sandbox


def test_sandbox_and_browser_relay_import_nothing_from_server() -> None:
    probe = (
        "import sys, sandbox, sandbox.manager, sandbox.local_engine, sandbox.worker, "
        "sandbox.image.build, browser_relay, browser_relay.server; "
        "print(sorted(m for m in sys.modules if m == 'server' or m.startswith('server.')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_sandbox_public_surface_is_pinned() -> None:
    assert sorted(sandbox.__all__) == sorted(
        [
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
    )
    for name in sandbox.__all__:
        assert getattr(sandbox, name) is not None


def test_evals_use_only_the_public_contract_and_the_client_helpers() -> None:
    probe = (
        "import sys, evals.cli, evals.runner, evals.report; "
        "print(sorted(m for m in sys.modules if m == 'server' or m.startswith('server.')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['server', 'server.cli_common', 'server.client']"
