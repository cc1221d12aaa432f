"""The local provider, for machines without Docker: a directory per thread and subprocesses.

It DOES NOT ISOLATE: commands run as this service's user, see its files and reach its network.
It keeps the other promises: paths confined to the thread's directory (symlinks followed), a
deadline that kills the whole tree, capped output kept in full, the same result views.

Killing the tree: each command starts a new session and carries a random marker in its
environment, which children inherit even when they call `setsid`. At the deadline, and after
every command, the processes whose environment holds the marker are killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import structlog

from sandbox import files, identity
from sandbox.commands import CommandResult, OutputCallback, OutputCapture, record_output
from sandbox.errors import (
    FileTooLargeError,
    PathEscapeError,
    SandboxUnavailableError,
    WorkspaceFileNotFoundError,
)
from sandbox.image.build import SEED_DIR
from sandbox.manager import MARKER

log = structlog.get_logger(__name__)

JOB_MARKER = "INSTANCE_AI_JOB"
RESULTS_DIR = ".instance-ai/results"
T = TypeVar("T")


class LocalSandboxes:
    """The `Sandboxes` surface over directories under `root`."""

    def __init__(
        self,
        root: Path,
        *,
        max_file_bytes: int = files.DEFAULT_MAX_FILE_BYTES,
        max_output_bytes: int = 64 * 1024,
        max_saved_bytes: int = 32 * 1024 * 1024,
        default_timeout_s: float = 300.0,
    ) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.max_output_bytes = max_output_bytes
        self.max_saved_bytes = max_saved_bytes
        self.default_timeout_s = default_timeout_s
        log.warning(
            "LOCAL SANDBOXES DO NOT ISOLATE: commands run as this service's user, with its "
            "files and network. Use the docker provider for anything untrusted.",
            root=str(root),
        )

    def directory(self, thread_id: str) -> Path:
        """The thread's workspace, named by its hashed id (never by the caller's text)."""
        workspace = self.root / identity.sandbox_id(thread_id)
        if not (workspace / MARKER).exists():
            workspace.mkdir(parents=True, exist_ok=True)
            shutil.copytree(SEED_DIR, workspace, dirs_exist_ok=True)
            (workspace / MARKER).touch()
        return workspace

    def _resolve(self, thread_id: str, path: str) -> Path:
        workspace = self.directory(thread_id).resolve()
        target = (workspace / files.confine(path)).resolve()
        if target != workspace and workspace not in target.parents:
            raise PathEscapeError(f"{path!r} leads outside the workspace (through a symlink?)")
        return target

    # -- files ----------------------------------------------------------------------------

    async def read_file(self, thread_id: str, path: str) -> bytes:
        return await _call(self._read, thread_id, path, self.max_file_bytes)

    async def read_result(self, thread_id: str, path: str) -> bytes:
        limit = max(self.max_file_bytes, self.max_saved_bytes)
        return await _call(self._read, thread_id, path, limit)

    def _read(self, thread_id: str, path: str, limit: int) -> bytes:
        target = self._resolve(thread_id, path)
        if not target.exists():
            raise WorkspaceFileNotFoundError(f"{path!r} does not exist in the workspace")
        if not target.is_file():
            raise WorkspaceFileNotFoundError(f"{path!r} is not a regular file")
        if target.stat().st_size > limit:
            raise FileTooLargeError(f"{path!r} is larger than {limit} bytes")
        return target.read_bytes()

    async def write_file(self, thread_id: str, path: str, data: bytes) -> int:
        return await _call(self._write, thread_id, path, data)

    def _write(self, thread_id: str, path: str, data: bytes) -> int:
        if len(data) > self.max_file_bytes:
            raise FileTooLargeError(
                f"{len(data)} bytes is over the {self.max_file_bytes}-byte limit for one write"
            )
        target = self._resolve(thread_id, path)
        if target.exists() and not target.is_file():
            raise WorkspaceFileNotFoundError(f"{path!r} is not a regular file")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{uuid.uuid4().hex}.partial")
        partial.write_bytes(data)
        partial.replace(target)  # readers never see half a file
        return len(data)

    async def str_replace(
        self, thread_id: str, path: str, old: str, new: str, *, replace_all: bool = False
    ) -> int:
        text = (await self.read_file(thread_id, path)).decode()
        replaced, count = files.replace_text(text, old, new, replace_all=replace_all, path=path)
        await self.write_file(thread_id, path, replaced.encode())
        return count

    async def list_files(
        self, thread_id: str, path: str = ".", *, recursive: bool = False
    ) -> tuple[list[files.FileEntry], bool]:
        return await _call(self._list, thread_id, path, recursive)

    def _list(
        self, thread_id: str, path: str, recursive: bool
    ) -> tuple[list[files.FileEntry], bool]:
        base = self._resolve(thread_id, path)
        if not base.is_dir():
            raise WorkspaceFileNotFoundError(f"{path!r} is not a directory in the workspace")
        found = base.rglob("*") if recursive else base.iterdir()
        entries: list[files.FileEntry] = []
        for item in found:
            if len(entries) > files.DEFAULT_MAX_ENTRIES:
                break
            kind = "symlink" if item.is_symlink() else "directory" if item.is_dir() else "file"
            size = 0 if kind == "symlink" else item.lstat().st_size
            entries.append(files.FileEntry(path=str(item.relative_to(base)), type=kind, size=size))
        truncated = len(entries) > files.DEFAULT_MAX_ENTRIES
        return sorted(entries[: files.DEFAULT_MAX_ENTRIES], key=lambda e: e.path), truncated

    # -- commands -------------------------------------------------------------------------

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
        workspace = self.directory(thread_id)
        directory = self._resolve(thread_id, cwd) if cwd else workspace
        marker = uuid.uuid4().hex
        capture = OutputCapture(self.max_output_bytes, self.max_saved_bytes)
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            "umask 002\n" + command,
            cwd=directory,
            # A minimal environment: the service's own (keys, tokens) never reaches a command.
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(workspace),
                "LANG": "C.UTF-8",
                **(env or {}),
                JOB_MARKER: marker,
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        readers = [
            asyncio.create_task(_pump(process.stdout, "stdout", capture, on_output)),
            asyncio.create_task(_pump(process.stderr, "stderr", capture, on_output)),
        ]
        timed_out = cancelled = False
        try:
            await asyncio.wait_for(_exited(process.pid), timeout_s or self.default_timeout_s)
        except TimeoutError:
            timed_out = True
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            # Always: leftovers of a finished command must not outlive it either.
            await _call(kill_marked, marker, process.pid)  # its own session: pgid == pid
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            await asyncio.gather(*readers, return_exceptions=True)
        full_path = None
        if capture.truncated:
            full_path = f"{RESULTS_DIR}/{marker[:16]}.log"
            await self.write_result(thread_id, full_path, bytes(capture.combined))
        return CommandResult(
            exit_code=124 if timed_out else (process.returncode or 0),
            stdout=capture.kept["stdout"].decode(errors="replace"),
            stderr=capture.kept["stderr"].decode(errors="replace"),
            timed_out=timed_out,
            cancelled=cancelled,
            duration_ms=int((time.monotonic() - started) * 1000),
            truncated=capture.truncated,
            full_output_path=full_path,
        )

    async def write_result(self, thread_id: str, path: str, data: bytes) -> None:
        target = self._resolve(thread_id, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        await _call(target.write_bytes, data)

    # -- lifecycle ------------------------------------------------------------------------

    async def destroy(self, thread_id: str) -> bool:
        workspace = self.root / identity.sandbox_id(thread_id)
        existed = workspace.exists()
        await _call(shutil.rmtree, workspace, True)
        return existed

    async def sweep_idle(self) -> list[str]:
        return []  # nothing is held between calls

    async def close(self) -> None:
        return None


async def _exited(pid: int) -> None:
    """Until the process has exited. Not `Process.wait()`: that also waits for its pipes,
    which a leftover child can hold open for ever; the leftovers are killed afterwards."""
    while _running(pid):  # noqa: ASYNC110 - no event to wait on: polling /proc is the way
        await asyncio.sleep(0.01)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def _pump(
    stream: asyncio.StreamReader | None,
    name: str,
    capture: OutputCapture,
    on_output: OutputCallback | None,
) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        record_output((name, chunk), capture, on_output)


def kill_marked(marker: str, group: int) -> None:
    """SIGKILL the command's process group and every process whose environment carries the
    job marker, until two rounds in a row find nothing. (A child caught in the middle of
    `exec` can show an empty environment for a moment; it is still in the group then, or
    seen by the next round.)"""
    needle = f"{JOB_MARKER}={marker}".encode()
    quiet_rounds = 0
    for _round in range(40):
        # The group still holds our own unreaped shell, so this kill always "succeeds": it
        # kills, but only the environment scan tells whether anything is left.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        found = False
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environment = (entry / "environ").read_bytes()
            except OSError:  # gone, or not ours to read
                continue
            if needle in environment.split(b"\0"):
                found = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry.name), signal.SIGKILL)
        quiet_rounds = 0 if found else quiet_rounds + 1
        if quiet_rounds == 2:
            return
        time.sleep(0.02)
    raise SandboxUnavailableError("a command's processes could not all be killed")


async def _call(function: Callable[..., T], *args: object) -> T:
    return await asyncio.to_thread(function, *args)
