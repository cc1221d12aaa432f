"""Assemble the sandbox's root filesystem from this host's own binaries.

No image registry is reachable here, so the base image is a tar built from the host: the Node
runtime, a shell, GNU coreutils-grade tools (GNU `timeout` returns 124 on a deadline, busybox's
does not) and procps, each with the shared libraries `ldd` says it needs, in a merged-/usr
layout. It is then `docker import`ed. Every file is owned by root; the only places uid 1000
may write are the workspace (a volume at run time) and /tmp (a tmpfs at run time).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from pathlib import Path

from sandbox.errors import ImageBuildError

__all__ = [
    "APP_DIR",
    "BINARIES",
    "USER_UID",
    "WORKSPACE",
    "collect_files",
    "in_merged_usr",
    "inputs_digest",
    "libraries",
    "write_rootfs_tar",
]

# What a sandbox command can count on finding. Paths are resolved on the host.
BINARIES = (
    "node",
    "bash", "sh", "dash",
    "timeout", "env", "setsid", "kill", "nohup", "sleep", "id", "whoami", "nproc", "date",
    "cat", "ls", "cp", "mv", "rm", "mkdir", "rmdir", "ln", "touch", "chmod", "stat", "du",
    "head", "tail", "wc", "sort", "uniq", "cut", "tr", "tee", "printf", "echo", "true",
    "false", "test", "dirname", "basename", "readlink", "realpath", "mktemp", "seq",
    "grep", "sed", "find", "xargs", "tar", "gzip", "diff",
    "ps", "pgrep", "pkill",
)  # fmt: skip
WORKSPACE = "/home/user/workspace"
APP_DIR = "/opt/app"
USER_UID = 1000

_LDD_PATH = re.compile(r"(/\S+)")


def _host_path(name: str) -> Path:
    for directory in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        candidate = Path(directory) / name
        if candidate.exists():
            return candidate
    raise ImageBuildError(
        f"{name!r} is not installed on this host; the sandbox image is assembled from host "
        "binaries (install Debian's coreutils, procps, findutils, diffutils, nodejs)"
    )


def libraries(binary: Path) -> set[str]:
    result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    if result.returncode != 0:  # static binaries and scripts need nothing
        return set()
    if "not found" in result.stdout:
        raise ImageBuildError(f"{binary} needs a library this host lacks:\n{result.stdout}")
    return {m.group(1) for line in result.stdout.splitlines() if (m := _LDD_PATH.search(line))}


def in_merged_usr(path: str) -> str:
    """Where a host path lives in a merged-/usr tree: /lib/x → usr/lib/x, /bin/x → usr/bin/x."""
    real_dir = os.path.realpath(os.path.dirname(path))
    return (real_dir + "/" + os.path.basename(path)).lstrip("/")


def collect_files() -> dict[str, Path]:
    """Archive path → host file, for every binary and library the sandbox needs."""
    files: dict[str, Path] = {}
    for name in BINARIES:
        binary = _host_path(name)
        files[in_merged_usr(str(binary))] = binary.resolve()
        for library in libraries(binary.resolve()):
            files[in_merged_usr(library)] = Path(library).resolve()
    return files


def inputs_digest(files: dict[str, Path]) -> str:
    """A digest of everything that goes into the tar: this module's code (the layout), and
    every host file's name and contents."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for archive_path in sorted(files):
        digest.update(archive_path.encode())
        digest.update(files[archive_path].read_bytes())
    return digest.hexdigest()


def _etc_files() -> dict[str, bytes]:
    # A passwd entry and an explicit HOME: without them os.userInfo() and whoami fail.
    return {
        "etc/passwd": b"root:x:0:0:root:/root:/bin/bash\n"
        b"user:x:1000:1000:sandbox:/home/user:/bin/bash\n",
        "etc/group": b"root:x:0:\nuser:x:1000:\n",
        "etc/nsswitch.conf": b"passwd: files\ngroup: files\nhosts: files\n",
    }


def write_rootfs_tar(files: dict[str, Path], out: Path) -> None:
    """Write the root filesystem as a tar ready for `docker import`."""
    with tarfile.open(out, "w") as tar:

        def add_dir(path: str, mode: int = 0o755, uid: int = 0) -> None:
            # uid doubles as gid: the sandbox user's group is 1000 too.
            info = tarfile.TarInfo(path)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, uid, uid
            tar.addfile(info)

        def add_link(path: str, target: str) -> None:
            info = tarfile.TarInfo(path)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)

        def add_bytes(path: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for directory in (
            "usr",
            "usr/bin",
            "usr/lib",
            "usr/lib64",
            "usr/sbin",
            "etc",
            "opt",
            "proc",
            "sys",
            "dev",
            "root",
            "var",
            "home",
            APP_DIR.lstrip("/"),
        ):
            add_dir(directory)
        add_dir("tmp", 0o1777)
        add_dir("home/user", uid=USER_UID)
        # The workspace exists in the image owned by uid 1000, so a fresh named volume mounted
        # there is copied up with that owner (a path absent from the image would be root's).
        # Group-writable and setgid: commands run as per-job uids in group 1000 (see
        # commands.py), and what they create must stay editable by the sandbox user.
        add_dir(WORKSPACE.lstrip("/"), mode=0o2775, uid=USER_UID)
        for link, target in (
            ("bin", "usr/bin"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
            ("sbin", "usr/sbin"),
        ):
            add_link(link, target)
        # Module resolution from the workspace: node walks up to /home/user/node_modules.
        add_link("home/user/node_modules", f"{APP_DIR}/node_modules")
        for path, data in _etc_files().items():
            add_bytes(path, data)
        made_dirs: set[str] = set()
        for archive_path in sorted(files):
            parent = os.path.dirname(archive_path)
            if parent not in made_dirs and parent.count("/") > 1:
                add_dir(parent)
                made_dirs.add(parent)
            source = files[archive_path]
            add_bytes(archive_path, source.read_bytes(), mode=source.stat().st_mode & 0o777)
