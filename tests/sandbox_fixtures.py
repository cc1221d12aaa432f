"""Fixtures for tests that need the real Docker engine and the real sandbox image."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
import pytest

from sandbox import identity
from sandbox.docker_engine import DockerEngine, connect
from sandbox.engine import ContainerEngine, ContainerInfo, ExecResult, SandboxLimits
from sandbox.image.build import BuiltImage, ImageBuilder
from sandbox.job_launcher import LAUNCHER_SCRIPT
from sandbox.provider import SandboxProvider, remove_owner
from sandbox.runsc_cli import CGROUP_PARENT, PIDS_CGROUPS, RUNSC_FLAGS
from sandbox.runsc_engine import RunscEngine
from sandbox.runtimes import AUTO, RUNC, RUNSC, RuntimeSetting, choose_runtime
from server.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
# Shared with `make sandbox-image`, so the suite reuses what the set-up step built.
BUILD_CACHE = Path(os.environ.get("INSTANCE_AI_SANDBOX_CACHE", ROOT / ".cache" / "sandbox"))
EGRESS_ROOTS = "instance-ai-egress-*"  # server/runtime/egress.py, for deep data directories
# The runsc engine's root that servers the tests start use (the setting's default).
RUNSC_ROOT: Path = Settings.model_fields["sandbox_runsc_root"].default


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = connect()
    yield client
    client.close()


@pytest.fixture(scope="session")
def sandbox_image(docker_client: docker.DockerClient) -> BuiltImage:
    return ImageBuilder(docker_client, cache_dir=BUILD_CACHE).build()


@pytest.fixture
def owner(docker_client: docker.DockerClient) -> Iterator[str]:
    """A label unique to this test; everything carrying it is removed afterwards."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    remove_owned(docker_client, name)


def remove_owned(docker_client: docker.DockerClient, name: str) -> None:
    """Remove every container, egress directory and workspace volume of an owner, and check
    none is left. (A server whose data directory is deep keeps its egress directories in
    /tmp, EGRESS_ROOTS; one in the test's own directory goes with it.)"""
    roots = sorted(Path(tempfile.gettempdir()).glob(EGRESS_ROOTS))
    remove_owner(DockerEngine(docker_client), name, roots)
    runsc = RunscEngine(docker_client, RUNSC_ROOT)
    remove_owner(runsc, name, roots)
    assert not runsc.containers({identity.LABEL_OWNER: name})
    assert not runsc.volumes(name_prefix=identity.volume_name(name, ""))
    for root in roots:  # emptied: nothing else of that server is left
        with contextlib.suppress(OSError):
            root.rmdir()
    # Nothing of this test may be left behind, labelled or not.
    selector = {"label": f"{identity.LABEL_OWNER}={name}"}
    assert not docker_client.containers.list(all=True, filters=selector)
    assert not docker_client.volumes.list(filters={"name": identity.volume_name(name, "")})


def docker_env(owner: str) -> dict[str, str]:
    """The environment of a server started as a process, with real sandboxes under `owner`
    (no warm pool: tests create what they use)."""
    return {
        "INSTANCE_AI_SANDBOX_PROVIDER": "docker",
        "INSTANCE_AI_SANDBOX_OWNER": owner,
        "INSTANCE_AI_SANDBOX_POOL_SIZE": "0",
    }


@pytest.fixture(scope="session")
def docker_engine(docker_client: docker.DockerClient) -> DockerEngine:
    """The engine seam over the session's client (closed with it)."""
    return DockerEngine(docker_client)


@pytest.fixture(scope="session")
def runsc_engine(docker_client: docker.DockerClient) -> RunscEngine:
    """The runsc engine on the service's default root (its exported images shared with
    servers the tests start), the image kept by the session's Docker engine."""
    return RunscEngine(docker_client, RUNSC_ROOT)


@pytest.fixture(scope="session")
def sandbox_limits(docker_engine: DockerEngine) -> SandboxLimits:
    """The hardening of the suite's sandboxes, under the runtime the service would choose
    here: INSTANCE_AI_SANDBOX_RUNTIME as a server reads it (auto: runsc where the engine has
    it). The suite runs whole under the default and its attack and fault tests under the
    other runtime too (Makefile, `test`)."""
    wanted = os.environ.get("INSTANCE_AI_SANDBOX_RUNTIME", AUTO)
    assert wanted in (AUTO, RUNC, RUNSC), f"INSTANCE_AI_SANDBOX_RUNTIME={wanted!r}"
    choice = choose_runtime(cast(RuntimeSetting, wanted), docker_engine.runtimes())
    return SandboxLimits(runtime=choice.name)


@pytest.fixture
def provider(
    docker_engine: DockerEngine,
    sandbox_image: BuiltImage,
    owner: str,
    sandbox_limits: SandboxLimits,
) -> SandboxProvider:
    return SandboxProvider(
        docker_engine, image=sandbox_image.tag, owner=owner, limits=sandbox_limits
    )


def docker_attrs(container: ContainerInfo) -> dict[str, Any]:
    """What the Docker engine itself says of a container (a test looking past the seam)."""
    client = connect()
    try:
        attrs: dict[str, Any] = client.containers.get(container.id).attrs
        return attrs
    finally:
        client.close()


def owned_containers(owner: str) -> list[ContainerInfo]:
    """Every container of `owner`, whichever engine drives it: Docker, or runsc itself (a
    server's default where runsc can be driven here)."""
    client = connect()
    try:
        labels = {identity.LABEL_OWNER: owner}
        found = DockerEngine(client).containers(labels)
        return found + RunscEngine(client, RUNSC_ROOT).containers(labels)
    finally:
        client.close()


def exec_in(container: ContainerInfo, *argv: str) -> ExecResult:
    """Run a command in a container as the sandbox user, through whichever engine drives it."""
    client = connect()
    try:
        driven_by_runsc = (RUNSC_ROOT / "bundles" / container.id).is_dir()
        engine = RunscEngine(client, RUNSC_ROOT) if driven_by_runsc else DockerEngine(client)
        return engine.exec(container.id, list(argv), workdir="/")
    finally:
        client.close()


def stop_from_outside(container_id: str) -> None:
    """What an engine restart or the host does to a sandbox (by its id or an id prefix), its
    service not told: Docker stops the container; a runsc sandbox's processes are all killed
    on the host, from its cgroup. Returns once it is down."""
    bundles = sorted((RUNSC_ROOT / "bundles").glob(f"{container_id}*"))
    if not bundles:
        client = connect()
        try:
            client.containers.get(container_id).stop(timeout=0)
        finally:
            client.close()
        return
    procs = PIDS_CGROUPS / CGROUP_PARENT.strip("/") / bundles[0].name / "cgroup.procs"
    for pid in procs.read_text().split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while procs.exists() and procs.read_text().strip():
        assert time.monotonic() < deadline, "the sandbox's processes outlived SIGKILL"
        time.sleep(0.05)


def owned_container(owner: str, name_or_id: str) -> ContainerInfo:
    """One container of `owner` by its name or an id prefix (a sandbox's hostname is one)."""
    found = [c for c in owned_containers(owner) if name_or_id in (c.name, c.id[: len(name_or_id)])]
    assert len(found) == 1, f"{name_or_id!r}: {found}"
    return found[0]


@dataclass(frozen=True, kw_only=True)
class HostView:
    """A sandbox as its engine set it up on the host, whichever engine: what Docker's inspect
    says, or what the runsc engine's OCI bundle says (its config.json)."""

    driver: str  # docker | runsc
    runtime: str
    read_only: bool
    network: str
    # Of the sandbox's first process: none, or the job launcher's (job_launcher.py), which
    # runs everything else as `user`.
    capabilities: frozenset[str]
    launcher: bool
    no_new_privileges: bool
    user: str
    memory: int
    pids: int
    nano_cpus: int
    tmp_options: str
    # Where each workspace volume is mounted: destination → the volume's name.
    volumes: dict[str, str]

    @classmethod
    def of(cls, container: ContainerInfo) -> HostView:
        bundle = RUNSC_ROOT / "bundles" / container.id / "config.json"
        if bundle.is_file():
            return cls._of_bundle(json.loads(bundle.read_text()))
        attrs = docker_attrs(container)
        host = attrs["HostConfig"]
        return cls(
            driver="docker",
            runtime=host["Runtime"],
            read_only=host["ReadonlyRootfs"],
            network=host["NetworkMode"],
            capabilities=frozenset(host["CapAdd"] or ()) - {"ALL"}
            if host["CapDrop"] == ["ALL"]
            else frozenset({"(not all dropped)"}),
            launcher=False,
            no_new_privileges="no-new-privileges" in (host["SecurityOpt"] or []),
            user=attrs["Config"]["User"],
            memory=host["Memory"],
            pids=host["PidsLimit"],
            nano_cpus=host["NanoCpus"],
            tmp_options=host["Tmpfs"]["/tmp"],
            volumes={m["Destination"]: m["Name"] for m in attrs["Mounts"] if m["Type"] == "volume"},
        )

    @classmethod
    def _of_bundle(cls, config: dict[str, Any]) -> HostView:
        process, resources = config["process"], config["linux"]["resources"]
        cpu = resources["cpu"]
        tmp = next(m for m in config["mounts"] if m["destination"] == "/tmp")
        user, args = process["user"], process["args"]
        launcher = LAUNCHER_SCRIPT in args
        return cls(
            driver="runsc",
            runtime=RUNSC,
            read_only=config["root"]["readonly"],
            # runsc itself is always run with --network=none (sandbox/runsc_cli.py).
            network="none" if "--network=none" in RUNSC_FLAGS else "?",
            capabilities=frozenset(
                cap for kind in process.get("capabilities", {}).values() for cap in kind
            ),
            launcher=launcher,
            no_new_privileges=process["noNewPrivileges"],
            user=args[args.index("--user") + 1] if launcher else f"{user['uid']}:{user['gid']}",
            memory=resources["memory"]["limit"],
            pids=resources["pids"]["limit"],
            nano_cpus=cpu["quota"] * 10**9 // cpu["period"],
            tmp_options=",".join(tmp["options"]),
            # A volume's data is bound from the engine's records (volumes/<name>/_data).
            volumes={
                m["destination"]: Path(m["source"]).parent.name
                for m in config["mounts"]
                if Path(m["source"]).is_relative_to(RUNSC_ROOT / "records" / "volumes")
            },
        )


def output_of(engine: ContainerEngine, container: ContainerInfo, *argv: str) -> str:
    """What a command prints in the container, run as the sandbox user."""
    return engine.exec(container.id, list(argv), workdir="/").stdout.decode()
