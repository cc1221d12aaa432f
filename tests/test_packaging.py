"""The service as users install it: the wheel built from pyproject.toml, installed into a
fresh virtual environment without the dev extras, starts and serves."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.image.build import BuiltImage
from tests.sandbox_fixtures import docker_env
from tests.test_cli import ServerProcess, start_server, stop_server

# Building the wheel and installing its dependencies into a fresh environment takes a while
# on a cold machine (the package index is reached through a proxy).
pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "order-intake.workflow.ts"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `bin/` of a fresh environment with the wheel and its runtime dependencies only."""
    root = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(root / "dist"), str(ROOT)], check=True)
    (wheel,) = (root / "dist").glob("instance_ai-*.whl")
    # The environment without a pip of its own: this one's pip installs into it (`--python`),
    # without byte-compiling every dependency up front (what the service imports is compiled
    # as it is first imported, as a user's would be).
    venv.EnvBuilder(with_pip=False).create(root / "env")
    bin_dir = root / "env" / "bin"
    install = [*pip, "--python", str(bin_dir / "python"), "install", "--no-compile"]
    subprocess.run([*install, str(wheel)], check=True, timeout=900)
    return bin_dir


@pytest.fixture
def served(
    installed: Path, tmp_path: Path, owner: str, sandbox_image: BuiltImage
) -> Iterator[ServerProcess]:
    server = start_server(
        tmp_path / "data", env=docker_env(owner), cli=str(installed / "instance-ai")
    )
    yield server
    stop_server(server)


def run(installed: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(installed / "instance-ai"), *args], capture_output=True, text=True, timeout=300
    )


def test_the_wheel_carries_no_dev_dependency(installed: Path) -> None:
    for module in ("playwright", "pytest", "mypy", "grpc_tools"):
        probe = subprocess.run([str(installed / "python"), "-c", f"import {module}"])
        assert probe.returncode != 0, f"{module} came with the plain install"


def test_the_installed_service_serves_health_tools_and_builds(
    installed: Path, served: ServerProcess
) -> None:
    assert run(installed, "health", "--server", served.address).returncode == 0
    listed = run(installed, "tools", "list", "--json", "--server", served.address)
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    assert tools["build-workflow"]["registered"] and tools["list-workflows"]["registered"]
    # Without the browser extra the browser tools are absent, and say what they need.
    assert not tools["browser_navigate"]["registered"]
    assert "instance-ai[browser]" in tools["browser_navigate"]["requires"]
    built = run(installed, "build", str(EXAMPLE), "--json", "--server", served.address)
    assert built.returncode == 0, built.stdout + built.stderr
    result = json.loads(built.stdout)
    assert result["success"] is True and result["workflowId"]


def test_the_service_image_copies_every_package_of_the_wheel() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    copied = {
        line.split()[1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
    }
    assert {p.split("/")[0] for p in packages} <= copied
    assert "browser" in project["project"]["optional-dependencies"]
    assert "'.[browser]'" in (ROOT / "Dockerfile").read_text()
