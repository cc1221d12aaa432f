"""n8n's own assistant code in our sandbox: @n8n/instance-ai 1.26.1 and @n8n/agents 0.26.1, as
the installed n8n 2.41.1 ships them, set up their workspace in a sandbox of the sandbox API
(their files, `npm install` through the egress proxy to the trusted registry, their marker)
and compile a workflow file there with n8n's build.mjs and diagnostics script
(tests/sandbox_client/n8n-workspace.cjs)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from instance_ai_cli import n8n_local
from sandbox.kinds import service_key
from tests.sandbox_api_fixtures import STATIC_KEY, SandboxApiServer

SCRIPT = Path(__file__).parent / "sandbox_client" / "n8n-workspace.cjs"


@pytest.mark.timeout(600)
def test_n8ns_workspace_is_set_up_and_builds_in_our_sandbox(sandbox_api: SandboxApiServer) -> None:
    installed = n8n_local.install()
    sandbox_id = str(uuid.uuid4())
    result = subprocess.run(
        [str(installed.node), str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=540,
        env={
            **os.environ,
            "N8N_MODULES": str(installed.n8n.parents[2]),
            "SANDBOX_API_URL": sandbox_api.url,
            "SANDBOX_API_KEY": STATIC_KEY,
            "SANDBOX_ID": sandbox_id,
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    done = json.loads(result.stdout.strip().splitlines()[-1])

    # n8n's set-up ran once, wrote its files and marker, and installed its packages.
    assert done["root"] == "/home/user/workspace"
    assert done["initialized"] is True and done["reinitialized"] is False
    assert done["marker"] is True
    for name in ("package.json", "tsconfig.json", "build.mjs", "workflow-diagnostics.mts"):
        assert name in done["files"]
    assert {"node-types", "node_modules", "src"} <= set(done["files"])

    # Its build.mjs compiled the workflow with the SDK it installed.
    build = done["build"]
    assert build["exitCode"] == 0, build
    built = json.loads(build["stdout"].strip().splitlines()[-1])
    assert built["success"] is True
    assert [n["name"] for n in built["workflow"]["nodes"]] == ["Start", "Greet"]
    assert built["workflow"]["connections"]["Start"]["main"][0][0]["node"] == "Greet"

    # Its diagnostics script: clean for the good file, TS2304 for the broken one.
    assert done["diagnostics"]["exitCode"] == 0, done["diagnostics"]
    assert json.loads(done["diagnostics"]["stdout"].strip().splitlines()[-1]) == []
    broken = json.loads(done["brokenDiagnostics"]["stdout"].strip().splitlines()[-1])
    assert any("TS2304" in e and "'notDefinedAnywhere'" in e for e in broken), broken

    # npm reached the registry through the egress proxy, each request logged by sandbox.
    through_proxy = [
        json.loads(line)
        for line in sandbox_api.log
        if '"egress"' in line and service_key(sandbox_id) in line
    ]
    assert through_proxy and all(e["method"] == "CONNECT" for e in through_proxy)
