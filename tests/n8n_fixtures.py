"""A real n8n for the n8n-instance tests: installed by `make n8n` (cached by version), started
once per test session on free loopback ports with a throwaway state directory, with an owner
and an API key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from instance_ai_cli import n8n_local
from server.settings import Settings

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
def n8n(tmp_path_factory: pytest.TempPathFactory) -> Iterator[n8n_local.LocalN8n]:
    state_dir = tmp_path_factory.mktemp("n8n")
    custom = state_dir / ".n8n" / "custom"
    custom.mkdir(parents=True)
    (custom / "AcmeLedgerApi.credentials.js").write_text(_CUSTOM_CREDENTIAL)
    running = n8n_local.start(n8n_local.install(), state_dir)
    try:
        yield running
    finally:
        running.stop()


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
