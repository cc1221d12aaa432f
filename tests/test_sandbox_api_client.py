"""n8n's own sandbox client, `@n8n/sandbox-client` 0.1.1 (tests/sandbox_client, pinned by its
lock file), calls every method of the sandbox API of a real service process on real Docker
sandboxes, under Node 24 as n8n runs it: tests/sandbox_client/client.test.mjs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from instance_ai_cli import n8n_local
from tests.sandbox_api_fixtures import STATIC_KEY, SandboxApiServer

ROOT = Path(__file__).parent.parent
CLIENT_TESTS = ROOT / "tests" / "sandbox_client"


@pytest.mark.timeout(600)
def test_n8ns_sandbox_client_against_the_sandbox_api(sandbox_api: SandboxApiServer) -> None:
    other_key = sandbox_api.new_key("client-test-other-tenant")
    node = n8n_local.install().node  # Node 24, as n8n runs; cached by version
    result = subprocess.run(
        [str(node), "--test", "--test-reporter=tap", "client.test.mjs"],
        cwd=CLIENT_TESTS,
        capture_output=True,
        text=True,
        timeout=540,
        env={
            **os.environ,
            "PATH": f"{node.parent}:{os.environ.get('PATH', '')}",
            "SANDBOX_API_URL": sandbox_api.url,
            "SANDBOX_API_KEY": STATIC_KEY,
            "SANDBOX_API_OTHER_KEY": other_key,
            "SANDBOX_STOP_COMMAND": json.dumps([sys.executable, "-m", "tests.stop_sandbox"]),
            "PYTHONPATH": str(ROOT),
        },
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "# fail 0" in report and "# pass 10" in report, report
