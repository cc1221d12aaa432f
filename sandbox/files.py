"""Workspace files, confined to the workspace root.

Paths are checked twice: lexically on the host (absolute paths outside the workspace and `..`
that climbs out are refused before any call), then inside the container with `realpath`, which
follows symlinks, so a link that leads out is refused too. Each operation is one `docker exec`
(or one exec plus one archive upload for writes), run as the sandbox user with umask 002.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from dataclasses import dataclass

import docker
from docker.models.containers import Container

from sandbox.errors import (
    EditMismatchError,
    FileTooLargeError,
    PathEscapeError,
    SandboxUnavailableError,
    WorkspaceFileNotFoundError,
)
from sandbox.image.rootfs import USER_UID, WORKSPACE

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_ENTRIES = 1000
_USER = f"{USER_UID}:{USER_UID}"

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


def _run(container: Container, script: str, *args: str) -> tuple[int, bytes, bytes]:
    try:
        result = container.exec_run(
            ["sh", "-c", script, "sh", *args], user=_USER, demux=True, workdir=WORKSPACE
        )
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"the sandbox did not answer: {exc}") from exc
    stdout, stderr = result.output
    return result.exit_code, stdout or b"", stderr or b""


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


def read_file(container: Container, path: str, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    relative = confine(path)
    code, out, err = _run(container, _READ, relative, str(max_bytes))
    _raise_for(code, path, err, limit=max_bytes)
    return out


def write_file(
    container: Container, path: str, data: bytes, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> int:
    """Create or replace a file (parents made as needed). Returns the bytes written."""
    if len(data) > max_bytes:
        raise FileTooLargeError(
            f"{len(data)} bytes is over the {max_bytes}-byte limit for one write; split the "
            "file or raise the sandbox's max file size"
        )
    relative = confine(path)
    code, out, err = _run(container, _PREPARE_WRITE, relative)
    _raise_for(code, path, err)
    target = out.decode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(posixpath.basename(target))
        info.size, info.mode, info.uid, info.gid = len(data), 0o664, USER_UID, USER_UID
        tar.addfile(info, io.BytesIO(data))
    try:
        if not container.put_archive(posixpath.dirname(target), archive.getvalue()):
            raise SandboxUnavailableError(f"writing {path!r} failed")
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"writing {path!r} failed: {exc}") from exc
    return len(data)


def str_replace(
    container: Container,
    path: str,
    old: str,
    new: str,
    *,
    replace_all: bool = False,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> int:
    """Replace the exact text `old` (which must be unique unless `replace_all`)."""
    text = read_file(container, path, max_bytes=max_bytes).decode()
    replaced, count = replace_text(text, old, new, replace_all=replace_all, path=path)
    write_file(container, path, replaced.encode(), max_bytes=max_bytes)
    return count


def replace_text(text: str, old: str, new: str, *, replace_all: bool, path: str) -> tuple[str, int]:
    """The edit rules every backend shares: `old` must be non-empty and found, and unique
    unless `replace_all`. Returns the new text and how many places changed."""
    if not old:
        raise EditMismatchError("old_str is empty: give the exact text to replace")
    count = text.count(old)
    if count == 0:
        raise EditMismatchError(
            f"old_str was not found in {path!r}; read the file and copy the text exactly"
        )
    if count > 1 and not replace_all:
        raise EditMismatchError(
            f"old_str matches {count} places in {path!r}; include more surrounding text so it "
            "matches once, or set replace_all"
        )
    return text.replace(old, new), count


def list_files(
    container: Container,
    path: str = ".",
    *,
    recursive: bool = False,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> tuple[list[FileEntry], bool]:
    """Entries under a workspace directory (relative to it) and whether the list was cut."""
    relative = confine(path)
    depth = "" if recursive else "-maxdepth 1"
    code, out, err = _run(container, _LIST, relative, depth, str(max_entries + 1))
    _raise_for(code, path, err)
    kinds = {"f": "file", "d": "directory", "l": "symlink"}
    entries = []
    for line in out.decode(errors="replace").splitlines():
        kind, size, name = line.split("\t", 2)
        entries.append(FileEntry(path=name, type=kinds.get(kind, "other"), size=int(size)))
    truncated = len(entries) > max_entries
    return sorted(entries[:max_entries], key=lambda e: e.path), truncated
