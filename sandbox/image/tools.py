"""The tools layer: what n8n's own sandbox service offers its AI assistant beyond the base's
shell tools. Node 24 with npm at `/opt/node24`, laid out like a Node distribution, from the
npm registry at pinned integrities (`deps/node-runtime.json`, unpacked by build.py): the
image's `PATH` puts /opt/node24/bin first, so it is the sandbox's one `node` (the worker's and
every command's; the base's Node 20 at /usr/bin/node is off `PATH`), and service sandboxes put
only their home's tool folders before it (sandbox/kinds.py). And from this host, like the base:
Debian's python3 with its standard library (and the wheels `python3 -m venv` installs pip
from), ripgrep, curl, and the CA bundle that python3 and curl verify TLS against; each binary
with the shared libraries `ldd` says it needs, in a merged-/usr layout.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
import tarfile
from collections.abc import Collection
from pathlib import Path

from sandbox.errors import ImageBuildError
from sandbox.image import rootfs

__all__ = [
    "BINARIES",
    "CA_BUNDLE",
    "NODE_DIR",
    "NODE_LINKS",
    "OPENSSL_FILES",
    "PYTHON_WHEELS",
    "collect_files",
    "inputs_digest",
    "write_layer_tar",
]

BINARIES = ("python3", "rg", "curl")
NODE_DIR = "/opt/node24"
# As in Node's own distribution: npm and npx run under whichever node is first on PATH.
NODE_LINKS = {
    "bin/npm": "../lib/node_modules/npm/bin/npm-cli.js",
    "bin/npx": "../lib/node_modules/npm/bin/npx-cli.js",
}
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Where OpenSSL itself looks (python3's default context loads cert.pem, not the bundle's own
# path), and its configuration: links into /etc/ssl on Debian, kept as links.
OPENSSL_FILES = tuple(Path("/usr/lib/ssl", name) for name in ("cert.pem", "certs", "openssl.cnf"))
# Debian's ensurepip installs pip into a new venv from these (no network needed).
PYTHON_WHEELS = Path("/usr/share/python-wheels")
# Never used in a sandbox: the standard library's own tests, and the static libraries and
# Makefile for building extensions (24 MB; there is no compiler in the image anyway).
_STDLIB_SKIPPED = ("test", "config-*")
# Debian's own python3, never a pyenv or venv one earlier on PATH.
_HOST_DIRS = (Path("/usr/bin"), Path("/bin"))


def collect_files(provided: Collection[str] = ()) -> dict[str, Path]:
    """Archive path → host path for the layer's host files, directories and symlinks kept as
    such; libraries already in `provided` (the layers below) are left out."""
    binaries = [_host_binary(name) for name in BINARIES]
    files: dict[str, Path] = {}
    for binary in binaries:
        files.update(_with_links(binary))
    python = binaries[BINARIES.index("python3")].resolve()
    stdlib = Path("/usr/lib") / python.name  # /usr/bin/python3.11 → /usr/lib/python3.11
    if not (stdlib / "os.py").exists():
        raise ImageBuildError(f"{stdlib} is not {python}'s standard library (install python3)")
    for path in _walk(stdlib, skipped=_STDLIB_SKIPPED):
        files[rootfs.in_merged_usr(str(path))] = path
        # Debian links sitecustomize.py into /etc: a dangling link fails every start.
        if path.is_symlink() and os.path.isabs(target := os.readlink(path)):
            files.update(_with_links(Path(target)))
    for path in [*_walk(PYTHON_WHEELS), CA_BUNDLE]:
        if path.exists():
            files[rootfs.in_merged_usr(str(path))] = path
    for path in OPENSSL_FILES:
        if path.exists():
            files.update(_with_links(path))
    # python3 loads its compiled modules with dlopen, where `ldd` on it cannot see them.
    objects = [b.resolve() for b in binaries] + sorted((stdlib / "lib-dynload").glob("*.so"))
    for path in objects:
        for library in rootfs.libraries(path):
            archive_path = rootfs.in_merged_usr(library)
            if archive_path not in provided:
                files[archive_path] = Path(library).resolve()
    return files


def inputs_digest(files: dict[str, Path]) -> str:
    """The layer's host part's identity: this module's code (the layout) and the name, size
    and modification time of every file and symlink (as the browser layer's, for the same
    reason: reading its 50 MB at every service start would cost). Compiled bytecode does not
    count: a host python3 run as root writes missing `.pyc` files, and they are only ever
    derived from the sources, which do count."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for name, path in sorted(files.items()):
        stat = path.lstat()
        if stat_module.S_ISDIR(stat.st_mode) or "__pycache__" in path.parts:
            continue
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def write_layer_tar(files: dict[str, Path], node_runtime: Path, out: Path) -> None:
    """The layer's files as a tar to unpack at `/`, every file owned by root and writable by
    nobody else; `node_runtime` is the unpacked Node distribution that goes to NODE_DIR."""

    def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mode &= 0o755
        return info

    with tarfile.open(out, "w") as tar:
        added: set[str] = set()
        for archive_path, source in sorted(files.items()):
            # Docker would make a missing parent itself, but with its own idea of the mode.
            parts = archive_path.split("/")
            for depth in range(1, len(parts)):
                parent = "/".join(parts[:depth])
                if parent not in added:
                    added.add(parent)
                    tar.add(Path("/", parent), arcname=parent, recursive=False, filter=root_owned)
            added.add(archive_path)
            tar.add(source, arcname=archive_path, recursive=False, filter=root_owned)
        tar.add(node_runtime, arcname=NODE_DIR.lstrip("/"), filter=root_owned)


def _host_binary(name: str) -> Path:
    for directory in _HOST_DIRS:
        candidate = directory / name
        if candidate.exists():
            return candidate
    raise ImageBuildError(
        f"{name!r} is not installed on this host; the sandbox image's tools layer carries it "
        "(scripts/setup-system installs Debian's python3, ripgrep and curl)"
    )


def _with_links(path: Path) -> dict[str, Path]:
    """`path` under its merged-/usr name, and each symlink on the way to the file it names,
    kept as a link (python3 → python3.11, as on the host)."""
    entries: dict[str, Path] = {}
    while path.is_symlink():
        entries[rootfs.in_merged_usr(str(path))] = path
        path = path.parent / os.readlink(path)
    entries[rootfs.in_merged_usr(str(path))] = path
    return entries


def _walk(tree: Path, skipped: tuple[str, ...] = ()) -> list[Path]:
    """Every directory, file and symlink under `tree` (itself included; nothing when it is
    missing), symlinks not followed, minus the top-level entries matching `skipped`."""
    if not tree.is_dir():
        return []
    found = [tree]
    for root, directories, names in os.walk(tree):
        if root == str(tree):
            directories[:] = [d for d in directories if not any(Path(d).match(p) for p in skipped)]
        found += [Path(root, name) for name in sorted(directories) + sorted(names)]
    return found
