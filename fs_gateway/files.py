"""The files under one root, and nothing else: every path is resolved (symlinks followed)
and must stay inside the root; `..` is refused outright; writes only when allowed."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["FileRoot", "OutsideRoot", "WriteNotAllowed"]

MAX_READ_BYTES = 512 * 1024
MAX_LIST_ENTRIES = 1000
MAX_MATCHES = 200
MAX_SEARCH_FILE_BYTES = 2 * 1024 * 1024


class OutsideRoot(ValueError):
    """A path that is not under the root."""


class WriteNotAllowed(PermissionError):
    """A write to a gateway started without --write."""


class FileRoot:
    def __init__(self, root: Path, *, write: bool = False) -> None:
        self.root = root.expanduser().resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(f"{root} is not a directory")
        self.write = write

    # -- paths -------------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """`path` (relative to the root) as a real path inside it."""
        if "\0" in path:
            raise OutsideRoot("a path may not contain NUL")
        relative = PurePosixPath(path.replace("\\", "/") or ".")
        if relative.is_absolute():
            raise OutsideRoot(f"{path!r} is absolute: give a path relative to the root")
        if ".." in relative.parts:
            raise OutsideRoot(f"{path!r} contains '..': paths stay inside the root")
        full = (self.root / relative).resolve()
        if not full.is_relative_to(self.root):
            raise OutsideRoot(f"{path!r} leads outside the root (through a symbolic link)")
        return full

    def relative(self, full: Path) -> str:
        return full.relative_to(self.root).as_posix() or "."

    def _inside(self, full: Path) -> bool:
        try:
            return full.resolve().is_relative_to(self.root)
        except OSError:
            return False

    # -- reads -------------------------------------------------------------------------------

    def read(self, path: str, *, offset: int = 0, limit: int = 2000) -> dict[str, Any]:
        """Lines `offset`… (at most `limit`, and at most MAX_READ_BYTES) of a text file."""
        full = self.resolve(path)
        if not full.is_file():
            raise FileNotFoundError(f"{path!r} is not a file under the root")
        with full.open("rb") as handle:
            raw = handle.read(MAX_READ_BYTES + 1)
        if b"\0" in raw[:8192]:
            raise ValueError(f"{path!r} is a binary file; file_info describes it")
        cut = len(raw) > MAX_READ_BYTES
        lines = raw[:MAX_READ_BYTES].decode("utf-8", errors="replace").splitlines()
        chosen = lines[offset : offset + limit]
        return {
            "path": self.relative(full),
            "content": "\n".join(chosen),
            "offset": offset,
            "lines": len(chosen),
            "totalLines": len(lines),
            "truncated": cut or offset + limit < len(lines),
        }

    def list(self, path: str = ".", *, recursive: bool = False) -> dict[str, Any]:
        """The entries of a directory (symbolic links listed, never followed)."""
        top = self.resolve(path)
        if not top.is_dir():
            raise NotADirectoryError(f"{path!r} is not a directory under the root")
        entries: list[dict[str, Any]] = []
        for directory, dirs, files in os.walk(top, followlinks=False):
            dirs.sort()
            for name in [*dirs, *sorted(files)]:
                entries.append(self._entry(Path(directory) / name))
                if len(entries) >= MAX_LIST_ENTRIES:
                    return {"path": self.relative(top), "entries": entries, "truncated": True}
            if not recursive:
                break
        return {"path": self.relative(top), "entries": entries, "truncated": False}

    def search(self, pattern: str, *, path: str = ".", glob: str = "*") -> dict[str, Any]:
        """Lines matching a regular expression, in files whose name matches `glob`."""
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"pattern is not a regular expression: {exc}") from None
        top = self.resolve(path)
        matches: list[dict[str, Any]] = []
        for directory, dirs, files in os.walk(top, followlinks=False):
            dirs.sort()
            for name in sorted(files):
                file = Path(directory) / name
                if not fnmatch.fnmatch(name, glob) or not self._searchable(file):
                    continue
                for number, line in enumerate(_lines(file), start=1):
                    if regex.search(line):
                        matches.append(
                            {"path": self.relative(file), "line": number, "text": line[:500]}
                        )
                        if len(matches) >= MAX_MATCHES:
                            return {"matches": matches, "truncated": True}
        return {"matches": matches, "truncated": False}

    def info(self, path: str) -> dict[str, Any]:
        return self._entry(self.resolve(path)) | {"path": path}

    def _searchable(self, file: Path) -> bool:
        if file.is_symlink() and not self._inside(file):
            return False
        try:
            return file.is_file() and file.stat().st_size <= MAX_SEARCH_FILE_BYTES
        except OSError:
            return False

    def _entry(self, full: Path) -> dict[str, Any]:
        info = full.lstat()
        kind = (
            "symlink"
            if stat.S_ISLNK(info.st_mode)
            else "directory"
            if stat.S_ISDIR(info.st_mode)
            else "file"
        )
        return {
            "path": full.relative_to(self.root).as_posix() or ".",
            "type": kind,
            "size": info.st_size,
            "modified": datetime.fromtimestamp(info.st_mtime, UTC).isoformat(),
        }

    # -- writes ------------------------------------------------------------------------------

    def write_text(self, path: str, content: str) -> dict[str, Any]:
        if not self.write:
            raise WriteNotAllowed("this gateway was started without --write: it only reads")
        full = self.resolve(path)
        if full == self.root or full.is_dir():
            raise IsADirectoryError(f"{path!r} is a directory")
        # The parent is inside the root (resolve checked the whole path).
        full.parent.mkdir(parents=True, exist_ok=True)
        temporary = full.with_name(f".{full.name}.instance-ai-tmp")
        temporary.write_text(content, encoding="utf-8")
        temporary.replace(full)
        return {"path": self.relative(full), "bytes": len(content.encode())}


def _lines(file: Path) -> list[str]:
    try:
        raw = file.read_bytes()
    except OSError:
        return []
    if b"\0" in raw[:8192]:
        return []
    return raw.decode("utf-8", errors="replace").splitlines()
