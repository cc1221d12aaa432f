"""A local n8n (instance_ai_cli/n8n_local.py) whose port is taken between the moment it was
found free and the moment n8n binds it (after its migrations: on a machine running the suite,
another process took one once, and a whole group of tests failed to start) is started again
on other ports."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from instance_ai_cli import n8n_local


@pytest.mark.timeout(600)
def test_an_n8n_whose_port_was_taken_as_it_started_starts_on_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = n8n_local.install()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = taken.getsockname()[1]
        # The first start's ports: its own, free, and its task broker's, taken.
        given = [n8n_local.free_port(), held]
        found_free = n8n_local.free_port
        monkeypatch.setattr(n8n_local, "free_port", lambda: given.pop(0) if given else found_free())
        running = n8n_local.start(installed, tmp_path / "n8n")
        try:
            said = running.log_path.read_text()
            assert f"port {held} is already in use" in said
            assert httpx.get(f"{running.url}/healthz/readiness").status_code == 200
            # Set up as any start is: its owner's API key works.
            listed = httpx.get(
                f"{running.url}/api/v1/workflows", headers={"X-N8N-API-KEY": running.api_key}
            )
            assert listed.status_code == 200, listed.text
        finally:
            running.stop()
    assert running.process is not None and running.process.poll() is not None
