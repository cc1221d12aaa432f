"""Workspace files, confined to the workspace root.

Paths are checked twice: lexically on the host (absolute paths outside the workspace and `..`
that climbs out are refused before any call), then inside the container with `realpath`, which
follows symlinks, so a link that leads out is refused too. Each operation is one exec of the
engine (or one exec plus one archive upload for writes), run as the sandbox user with umask
002. This is the path for when the in-sandbox worker cannot run (see manager.py).
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from dataclasses import dataclass

from sandbox.engine import ContainerEngine
from sandbox.errors import (
    EditMismatchError,
    FileTooLargeError,
    PathEscapeError,
    SandboxUnavailableError,
    WorkspaceFileNotFoundError,
)
from sandbox.image.rootfs import USER_UID, WORKSPACE
from sandbox.search import MAX_OUTPUT_BYTES, GrepQuery, GrepResult, grep_argv, read_grep_output
from sandbox.search import TIMEOUT_S as GREP_TIMEOUT_S

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_MAX_FILE_BYTES",
    "FileEntry",
    "Workspace",
    "confine",
    "grep",
    "list_files",
    "read_file",
    "replace_text",
    "str_replace",
    "write_file",
]

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_ENTRIES = 1000

# Exit codes of the in-container checks.
_ESCAPE, _MISSING, _TOO_LARGE, _NOT_A_FILE = 90, 91, 92, 93

# $1: path. Resolves symlinks (realpath -m: the last parts may not exist yet) and refuses
# anything outside the workspace; leaves the resolved path in $p.
_CONFINE = (
    f'p=$(realpath -m -- "$1") || exit {_ESCAPE}; '
    f'case "$p" in {WORKSPACE}|{WORKSPACE}/*) ;; *) exit {_ESCAPE};; esac; '
)
_READ = (
    _CONFINE + f'[ -e "$p" ] || exit {_MISSING}; [ -f "$p" ] || exit {_NOT_A_FILE}; '
    f'[ "$(stat -c %s -- "$p")" -le "$2" ] || exit {_TOO_LARGE}; exec cat -- "$p"'
)
_PREPARE_WRITE = (
    _CONFINE + f'if [ -e "$p" ] && [ ! -f "$p" ]; then exit {_NOT_A_FILE}; fi; '
    'umask 002; mkdir -p -- "$(dirname -- "$p")" && printf %s "$p"'
)
# $1: path, $2: a byte limit, then grep's arguments. Output past the limit, or a search past its
# 10-second deadline, is cut (`cut` on stderr says so).
_GREP = (
    _CONFINE + f'[ -e "$p" ] || exit {_MISSING}; limit=$2; shift 2; '
    f'status=$(mktemp); {{ timeout {GREP_TIMEOUT_S} grep "$@"; '
    'echo $? > "$status"; } | head -c "$limit"; '
    'code=$(cat "$status"); rm -f "$status"; '
    '{ [ "$code" -gt 128 ] || [ "$code" -eq 124 ]; } && { echo cut >&2; exit 0; }; exit "$code"'
)
_LIST = (
    _CONFINE + f'[ -d "$p" ] || exit {_MISSING}; '
    'find "$p" -mindepth 1 $2 -printf "%y\\t%s\\t%P\\n" 2>/dev/null | head -n "$3"'
)


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    path: str
    type: str  # "file", "directory", "symlink" or "other"
    size: int


def confine(path: str) -> str:
    """The workspace-relative, normalised form of `path`, or PathEscapeError."""
    if not path or "\0" in path:
        raise PathEscapeError("give a path inside the workspace, e.g. src/main.workflow.ts")
    absolute = posixpath.normpath(posixpath.join(WORKSPACE, path))
    if absolute != WORKSPACE and not absolute.startswith(WORKSPACE + "/"):
        raise PathEscapeError(
            f"{path!r} is outside the workspace; use a path relative to {WORKSPACE}"
        )
    return posixpath.relpath(absolute, WORKSPACE)


@dataclass(frozen=True)
class Workspace:
    """A sandbox's workspace, as the exec path reaches it."""

    engine: ContainerEngine
    container_id: str

    def run(self, script: str, *args: str) -> tuple[int, bytes, bytes]:
        result = self.engine.exec(
            self.container_id, ["sh", "-c", script, "sh", *args], workdir=WORKSPACE
        )
        return result.exit_code, result.stdout, result.stderr


def _raise_for(code: int, path: str, stderr: bytes, *, limit: int = 0) -> None:
    if code == 0:
        return
    if code == _ESCAPE:
        raise PathEscapeError(f"{path!r} leads outside the workspace (through a symlink?)")
    if code == _MISSING:
        raise WorkspaceFileNotFoundError(f"{path!r} does not exist in the workspace")
    if code == _NOT_A_FILE:
        raise WorkspaceFileNotFoundError(f"{path!r} is not a regular file")
    if code == _TOO_LARGE:
        raise FileTooLargeError(f"{path!r} is larger than {limit} bytes")
    raise SandboxUnavailableError(
        f"file operation on {path!r} failed ({code}): {stderr.decode(errors='replace')[-500:]}"
    )


def read_file(workspace: Workspace, path: str, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    relative = confine(path)
    code, out, err = workspace.run(_READ, relative, str(max_bytes))
    _raise_for(code, path, err, limit=max_bytes)
    return out


def write_file(
    workspace: Workspace, path: str, data: bytes, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> int:
    """Create or replace a file (parents made as needed). Returns the bytes written."""
    if len(data) > max_bytes:
        raise FileTooLargeError(
            f"{len(data)} bytes is over the {max_bytes}-byte limit for one write; split the "
            "file or raise the sandbox's max file size"
        )
    relative = confine(path)
    code, out, err = workspace.run(_PREPARE_WRITE, relative)
    _raise_for(code, path, err)
    target = out.decode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(posixpath.basename(target))
        info.size, info.mode, info.uid, info.gid = len(data), 0o664, USER_UID, USER_UID
        tar.addfile(info, io.BytesIO(data))
    workspace.engine.copy_in(workspace.container_id, posixpath.dirname(target), archive.getvalue())
    return len(data)


def str_replace(
    workspace: Workspace,
    path: str,
    old: str,
    new: str,
    *,
    replace_all: bool = False,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> int:
    """Replace the exact text `old` (which must be unique unless `replace_all`)."""
    text = read_file(workspace, path, max_bytes=max_bytes).decode()
    replaced, count = replace_text(text, old, new, replace_all=replace_all, path=path)
    write_file(workspace, path, replaced.encode(), max_bytes=max_bytes)
    return count


def replace_text(text: str, old: str, new: str, *, replace_all: bool, path: str) -> tuple[str, int]:
    """The edit rules every backend shares: `old` must be non-empty and found, and unique
    unless `replace_all`. Returns the new text and how many places changed."""
    if not old:
        raise EditMismatchError("the text to replace is empty: give the exact text to replace")
    count = text.count(old)
    if count == 0:
        raise EditMismatchError(
            f"the text to replace was not found in {path!r}; read the file and copy it exactly"
        )
    if count > 1 and not replace_all:
        raise EditMismatchError(
            f"the text to replace matches {count} places in {path!r}; include more surrounding "
            "text so it matches once, or replace every match"
        )
    return text.replace(old, new), count


def grep(workspace: Workspace, query: GrepQuery) -> GrepResult:
    """Search the workspace (see search.py)."""
    code, out, err = workspace.run(_GREP, query.path, str(MAX_OUTPUT_BYTES), *grep_argv(query))
    if code in (_ESCAPE, _MISSING):
        _raise_for(code, query.path, err)
    cut = err.endswith(b"cut\n") or len(out) >= MAX_OUTPUT_BYTES
    return read_grep_output(query, code, out, err.removesuffix(b"cut\n"), cut=cut)


def list_files(
    workspace: Workspace,
    path: str = ".",
    *,
    recursive: bool = False,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> tuple[list[FileEntry], bool]:
    """Entries under a workspace directory (relative to it) and whether the list was cut."""
    relative = confine(path)
    depth = "" if recursive else "-maxdepth 1"
    code, out, err = workspace.run(_LIST, relative, depth, str(max_entries + 1))
    _raise_for(code, path, err)
    kinds = {"f": "file", "d": "directory", "l": "symlink"}
    entries = []
    for line in out.decode(errors="replace").splitlines():
        kind, size, name = line.split("\t", 2)
        entries.append(FileEntry(path=name, type=kinds.get(kind, "other"), size=int(size)))
    truncated = len(entries) > max_entries
    return sorted(entries[:max_entries], key=lambda e: e.path), truncated
