"""A real n8n for the n8n-instance tests: installed by `make n8n` (cached by version), started
once per test run (for all of xdist's workers) on free loopback ports with a throwaway state
directory, with an owner and an API key."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from instance_ai_cli import n8n_local
from server.settings import Settings
from tests.run_shared import shared

__all__ = ["CUSTOM_CREDENTIAL_TYPE", "N8nApi", "make_n8n_settings", "n8n"]


# A credential type only this n8n knows (no package in the node catalog has it): n8n loads
# custom types from `<its user folder>/.n8n/custom`.
CUSTOM_CREDENTIAL_TYPE = "acmeLedgerApi"
_CUSTOM_CREDENTIAL = """
class AcmeLedgerApi {
  constructor() {
    this.name = 'acmeLedgerApi';
    this.displayName = 'Acme Ledger API';
    this.properties = [
      { displayName: 'API Key', name: 'apiKey', type: 'string',
        typeOptions: { password: true }, default: '', required: true },
      { displayName: 'Region', name: 'region', type: 'string', default: 'eu' },
    ];
  }
}
module.exports = { AcmeLedgerApi };
"""


@pytest.fixture(scope="session")
def n8n() -> n8n_local.LocalN8n:
    """One n8n for the whole run, shared by xdist's workers (tests/run_shared.py): each test
    makes its own workflows, credentials, tables and projects in it."""
    record = shared("n8n", _start_n8n)
    return n8n_local.LocalN8n(
        url=record["url"],
        api_key=record["api_key"],
        owner_email=record["owner_email"],
        owner_password=record["owner_password"],
        state_dir=Path(record["state_dir"]),
        log_path=Path(record["log_path"]),
        process=None,  # the run ends it
    )


def _start_n8n(state_dir: Path) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    custom = state_dir / ".n8n" / "custom"
    custom.mkdir(parents=True)
    (custom / "AcmeLedgerApi.credentials.js").write_text(_CUSTOM_CREDENTIAL)
    running = n8n_local.start(n8n_local.install(), state_dir)
    assert running.process is not None
    reach = {
        "url": running.url,
        "api_key": running.api_key,
        "owner_email": running.owner_email,
        "owner_password": running.owner_password,
        "state_dir": str(running.state_dir),
        "log_path": str(running.log_path),
    }
    return reach, running.process


@pytest.fixture
def make_n8n_settings(
    make_docker_settings: Callable[..., Settings], n8n: n8n_local.LocalN8n
) -> Callable[..., Settings]:
    """Settings for a server whose instance is the real n8n, with Docker sandboxes."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "instance": "n8n",
            "n8n_url": n8n.url,
            "n8n_api_key": n8n.api_key,
        }
        return make_docker_settings(**(values | overrides))

    return make


class N8nApi:
    """n8n's public API as the tests read it, beside the service (never through it)."""

    def __init__(self, n8n: n8n_local.LocalN8n) -> None:
        self.url = n8n.url
        self._headers = {"X-N8N-API-KEY": n8n.api_key}

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        async with httpx.AsyncClient(base_url=self.url + "/api/v1", timeout=30) as client:
            response = await client.request(method, path, json=body, headers=self._headers)
        response.raise_for_status()
        return response.json() if response.content else None

    async def webhook(self, path: str, body: dict[str, Any]) -> httpx.Response:
        async with httpx.AsyncClient(timeout=30) as client:
            return await client.post(f"{self.url}/webhook/{path}", json=body)
