"""The TypeScript client (`clients/typescript`, `@instance-ai/client`) under Node's own test
runner, against the real service: its tests start `instance-ai serve` themselves (and restart
it mid-stream); this test gives them the model stand-in, a state directory and a Docker
sandbox owner (whose sandboxes it removes afterwards), builds the package with `tsc`, and
checks `npm pack` makes an installable tarball."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sandbox.image.build import BuiltImage
from tests.agent_fixtures import model
from tests.fake_model import FakeMessagesAPI

__all__ = ["model"]  # fixtures, shared

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "typescript"


@pytest.mark.timeout(1200)
async def test_the_typescript_client_passes_its_node_tests_against_the_real_service(
    model: FakeMessagesAPI, owner: str, sandbox_image: BuiltImage, tmp_path: Path
) -> None:
    env = os.environ | {
        "INSTANCE_AI_TEST_BIN": str(Path(sys.executable).with_name("instance-ai")),
        "INSTANCE_AI_TEST_MODEL_URL": model.url,
        "INSTANCE_AI_TEST_STATE": str(tmp_path),
        "INSTANCE_AI_TEST_OWNER": owner,
    }
    node = await asyncio.create_subprocess_exec(
        "npm",
        "test",
        cwd=CLIENT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await node.communicate()
    report = output.decode(errors="replace")
    print(report)  # the Node report, for the record (pytest -s shows it)
    assert node.returncode == 0, report[-8000:]
    totals = dict(re.findall(r"^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$", report, re.M))
    assert int(totals["tests"]) >= 11 and totals["tests"] == totals["pass"], totals
    assert (totals["fail"], totals["skipped"], totals["todo"], totals["cancelled"]) == (
        "0",
        "0",
        "0",
        "0",
    )


def test_npm_pack_makes_a_tarball_that_installs_and_loads(tmp_path: Path) -> None:
    """`npm pack` builds the client (prepack) into a tarball of the compiled code alone, which
    a backend's project installs and imports."""
    npm = ["--no-audit", "--no-fund", "--loglevel=error"]
    subprocess.run(
        ["npm", "pack", "--pack-destination", str(tmp_path), *npm], cwd=CLIENT, check=True
    )
    [tarball] = tmp_path.glob("instance-ai-client-*.tgz")
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    assert {"package/dist/src/index.js", "package/dist/src/index.d.ts"} <= names
    assert not [
        n for n in names if "/test/" in n or (n.endswith(".ts") and not n.endswith(".d.ts"))
    ]

    backend = tmp_path / "backend"
    backend.mkdir()
    (backend / "package.json").write_text('{"name": "backend", "private": true, "type": "module"}')
    # The peer (@n8n/api-types) gives types only; a backend has it already.
    install = ["npm", "install", str(tarball), "--legacy-peer-deps", "--prefer-offline", *npm]
    subprocess.run([*install, "--ignore-scripts"], cwd=backend, check=True)
    loaded = subprocess.run(
        [
            "node",
            "--input-type=module",
            "-e",
            "import { InstanceAiClient, status } from '@instance-ai/client';"
            "const c = new InstanceAiClient({ address: '127.0.0.1:1' });"
            "console.log(typeof c.streamEvents, status.UNAVAILABLE); c.close();",
        ],
        cwd=backend,
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.split() == ["function", "14"]
