"""A service process serving the sandbox API, on real Docker sandboxes, for the tests of
the sandbox service API (n8n's sandbox provider)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest
import pytest_asyncio

from instance_ai_cli import n8n_local
from tests.fake_model import FakeMessagesAPI
from tests.sandbox_fixtures import docker_env, remove_owned
from tests.test_cli import CLI

STATIC_KEY = "static-sandbox-api-key-for-tests"


@dataclass(kw_only=True)
class SandboxApiServer:
    data_dir: Path
    owner: str
    env: dict[str, str]
    url: str = ""
    process: subprocess.Popen[str] | None = None
    log: list[str] = field(default_factory=list)

    def start(self, address: str = "127.0.0.1:0") -> SandboxApiServer:
        """Start the service (again: on the same address, data and owner)."""
        self.process = subprocess.Popen(
            [CLI, "serve", "--port", "0", "--log-format", "json", "--sandbox-api", address],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **self.cli_env()},
        )
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            record = json.loads(line)
            if record.get("event") == "sandbox service API listening":
                self.url = record["url"]
            if record.get("event") == "serving":
                break
        else:
            raise AssertionError("server did not start:\n" + "".join(self.log))
        # Keep reading its log (the egress lines are checked) without ever blocking it.
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)

    def cli_env(self) -> dict[str, str]:
        return {
            **docker_env(self.owner),
            "INSTANCE_AI_DATA_DIR": str(self.data_dir),
            "INSTANCE_AI_SANDBOX_API_KEYS": STATIC_KEY,
            "INSTANCE_AI_SANDBOX_API_POOL_SIZE": "1",
            **self.env,
        }

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CLI, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **self.cli_env()},
        )

    def new_key(self, name: str) -> str:
        made = self.cli("sandbox-api", "key", "create", name)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip().splitlines()[-1]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None

    def wait_for_log(self, text: str, timeout_s: float = 10.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [line for line in self.log if text in line]
            if found:
                return found[-1]
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never logged")


@pytest.fixture(scope="session")
def sandbox_api(
    tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient
) -> Iterator[SandboxApiServer]:
    """One service for the session's sandbox API tests (each makes its own sandboxes; the
    owner is this service's alone)."""
    owner = f"test-sbxapi-{os.urandom(5).hex()}"
    server = SandboxApiServer(
        data_dir=tmp_path_factory.mktemp("sandbox-api"),
        owner=owner,
        env={"INSTANCE_AI_SANDBOX_API_MAX_INFLIGHT": "32"},
    ).start()
    yield server
    server.stop()
    remove_owned(docker_client, owner)


@asynccontextmanager
async def n8n_with_its_assistant(
    installed: n8n_local.N8nInstall,
    state_dir: Path,
    model_url: str,
    sandbox_api: SandboxApiServer,
) -> AsyncIterator[n8n_local.LocalN8n]:
    """The reference: n8n with its own assistant on the scripted model, its sandbox ours
    (the variables of the README's "Your n8n's sandbox"); stopped on the way out."""
    n8n = await asyncio.to_thread(
        n8n_local.start,
        installed,
        state_dir,
        extra_env={
            "N8N_INSTANCE_AI_SANDBOX_ENABLED": "true",
            "N8N_INSTANCE_AI_SANDBOX_PROVIDER": "n8n-sandbox",
            "N8N_SANDBOX_SERVICE_URL": sandbox_api.url,
            "N8N_SANDBOX_SERVICE_API_KEY": STATIC_KEY,
            "N8N_INSTANCE_AI_MODEL": "anthropic/claude-sonnet-4-5",
            "N8N_INSTANCE_AI_MODEL_URL": model_url,
            "N8N_INSTANCE_AI_MODEL_API_KEY": "scripted",
        },
    )
    try:
        yield n8n
    finally:
        await asyncio.to_thread(n8n.stop)


# The modules that hold conversations with n8n's own assistant share one such n8n (it costs
# ~20 CPU-s to start): they run as one unit on one worker (tests/scheduling.py), each on the
# session's event loop, where the model stand-in serves.
WITH_N8NS_ASSISTANT = pytest.mark.asyncio(loop_scope="session")


@dataclass(frozen=True, kw_only=True)
class N8nAssistant:
    """n8n with its own assistant, on the scripted model: each test sets `model.responder`."""

    installed: n8n_local.N8nInstall
    n8n: n8n_local.LocalN8n
    model: FakeMessagesAPI


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def n8n_assistant(
    sandbox_api: SandboxApiServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[N8nAssistant]:
    """The session's n8n with its own assistant (for the modules of tests/scheduling.py's
    N8N_ASSISTANT_GROUP, marked WITH_N8NS_ASSISTANT; each test makes its own threads, workflows
    and tables in it)."""
    installed = n8n_local.install()
    model = FakeMessagesAPI()
    await model.start()
    try:
        state_dir = tmp_path_factory.mktemp("n8n-assistant")
        async with n8n_with_its_assistant(installed, state_dir, model.url, sandbox_api) as n8n:
            yield N8nAssistant(installed=installed, n8n=n8n, model=model)
    finally:
        await model.close()
