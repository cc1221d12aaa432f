"""A local n8n beside the service: installed (`n8n_install`: from the npm registry into a cache
keyed by its versions), started on free loopback ports with a state directory of its own, and
bootstrapped with an owner and an API key. For trying the n8n instance backend, and for its
tests."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import structlog

from instance_ai_cli.n8n_install import (
    N8N_VERSION,
    NODE_VERSION,
    N8nInstall,
    N8nSetupError,
    default_cache_dir,
    install,
)

__all__ = [
    "N8N_VERSION",
    "NODE_VERSION",
    "LocalN8n",
    "N8nInstall",
    "N8nSetupError",
    "PortTakenError",
    "default_cache_dir",
    "free_port",
    "install",
    "start",
]

log = structlog.get_logger(__name__)

# n8n's password rule: 8+ characters, a digit and an upper-case letter.
OWNER_EMAIL = "owner@instance-ai.local"
READY_TIMEOUT_S = 180.0
# What n8n says as it exits when a port it was given is taken ("n8n Task Broker's port 36181
# is already in use. Do you have another instance of n8n running already?"), and how many
# starts on new ports that may take.
PORT_TAKEN = "is already in use"
PORT_ATTEMPTS = 3


class PortTakenError(N8nSetupError):
    """n8n exited at start because a port it was given was taken meanwhile."""


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


def start(
    installed: N8nInstall, state_dir: Path, *, extra_env: dict[str, str] | None = None
) -> LocalN8n:
    """Start n8n on free loopback ports with `state_dir` as its home, wait until it is ready,
    and bootstrap an owner and an API key (kept in `state_dir`, readable by this user only).
    `extra_env`: more of n8n's settings (the tests start one in n8n's own test mode).

    The ports are found free here and bound by n8n seconds later (after its migrations):
    another process may take one meanwhile (on a machine running a test suite, it happens),
    and n8n then exits saying so. It is started again on other ports, a few times."""
    state_dir.mkdir(parents=True, exist_ok=True)
    for _retry in range(PORT_ATTEMPTS - 1):
        try:
            return _started(installed, state_dir, extra_env or {})
        except PortTakenError:
            log.warning("n8n's port was taken as it started; starting it on others")
    return _started(installed, state_dir, extra_env or {})


def _started(installed: N8nInstall, state_dir: Path, extra_env: dict[str, str]) -> LocalN8n:
    """One start: launched, ready, bootstrapped; stopped again when any of that fails."""
    running, log_offset = _launch(installed, state_dir, extra_env)
    try:
        _wait_ready(running, log_offset)
        running.owner_password, running.api_key = _bootstrap(running.url, state_dir)
    except BaseException:
        running.stop()
        raise
    return running


def _launch(
    installed: N8nInstall, state_dir: Path, extra_env: dict[str, str]
) -> tuple[LocalN8n, int]:
    """n8n started on two free ports, and where its log stood before it started."""
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
        **extra_env,
    }
    with log_path.open("ab") as output:
        log_offset = output.tell()
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
    return running, log_offset


# -- starting -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_ready(running: LocalN8n, log_offset: int) -> None:
    """Until n8n answers its readiness probe; PortTakenError when it exited because one of
    its ports was taken (its log since `log_offset` says so)."""
    assert running.process is not None  # started by this process
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            said = _log_since(running.log_path, log_offset)
            error = PortTakenError if PORT_TAKEN in said else N8nSetupError
            raise error(
                f"n8n exited with {running.process.returncode} while starting; see "
                f"{running.log_path}: {_tail(running.log_path)}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{running.url}/healthz/readiness", timeout=2).status_code == 200:
                return
        time.sleep(0.25)
    raise N8nSetupError(f"n8n was not ready within {READY_TIMEOUT_S:.0f} s; see {running.log_path}")


def _log_since(path: Path, offset: int) -> str:
    with path.open("rb") as log_file:
        log_file.seek(offset)
        return log_file.read().decode(errors="replace")


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
