"""Services sharing one Docker engine: each deployment (database) owns its sandboxes, and one
live service at a time holds an owner."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator

import docker
import docker.errors
import pytest

from instance_ai.v1 import workspace_pb2, workspace_pb2_grpc
from sandbox.engine import ContainerEngine
from sandbox.errors import SandboxOwnerInUseError
from sandbox.image.build import BuiltImage
from sandbox.lease import OwnerLease
from sandbox.manager import SandboxManager
from server.app import Application
from server.errors import FailedPreconditionError
from server.settings import Settings
from tests.conftest import serving
from tests.sandbox_fixtures import remove_owned


@pytest.fixture
def owners_to_clean(docker_client: docker.DockerClient) -> Iterator[list[str]]:
    """Owners made by the tests (defaults derived from their databases), removed after."""
    owners: list[str] = []
    yield owners
    for owner in owners:
        remove_owned(docker_client, owner)


def manager_of(app: Application) -> SandboxManager:
    manager = app.parts.sandboxes.manager
    assert isinstance(manager, SandboxManager)
    return manager


async def test_two_deployments_on_one_engine_never_touch_each_others_sandboxes(
    make_settings: Callable[..., Settings],
    tmp_path: object,
    sandbox_image: BuiltImage,
    owners_to_clean: list[str],
    docker_client: docker.DockerClient,
) -> None:
    first = make_settings(sandbox_provider="docker", sandbox_pool_size=0)
    second = first.model_copy(update={"data_dir": first.data_dir.parent / "second"})
    assert first.sandbox_owner is None  # the default: each database makes its own
    async with serving(first) as (app_a, channel_a):
        owner_a = manager_of(app_a).provider.owner
        owners_to_clean.append(owner_a)
        await app_a.parts.events.append("kept", "thread-created")
        stub = workspace_pb2_grpc.WorkspaceStub(channel_a)
        await stub.WriteFile(
            workspace_pb2.WriteFileRequest(thread_id="kept", path="notes.md", content="mine")
        )
        async with serving(second) as (app_b, _channel_b):
            owner_b = manager_of(app_b).provider.owner
            owners_to_clean.append(owner_b)
            assert owner_a != owner_b and owner_a.startswith("deployment-")
            # B's database does not know the thread "kept": its janitor must not care.
            report = await manager_of(app_b).janitor()
            assert report.removed_sandboxes == [] and report.removed_volumes == []
        read = await stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="kept", path="notes.md"))
        assert read.content == "mine"
    # A restart of the same deployment finds its own sandbox and files again.
    async with serving(first) as (app_again, channel_again):
        assert manager_of(app_again).provider.owner == owner_a
        stub = workspace_pb2_grpc.WorkspaceStub(channel_again)
        read = await stub.ReadFile(workspace_pb2.ReadFileRequest(thread_id="kept", path="notes.md"))
        assert read.content == "mine"


async def test_a_second_live_service_with_the_same_owner_is_refused(
    make_settings: Callable[..., Settings], sandbox_image: BuiltImage, owner: str
) -> None:
    first = make_settings(sandbox_provider="docker", sandbox_owner=owner, sandbox_pool_size=0)
    second = first.model_copy(update={"data_dir": first.data_dir.parent / "second"})
    async with serving(first):
        with pytest.raises(FailedPreconditionError, match="held by another running"):
            async with Application(second):
                pass
    # Once the first has stopped, the owner is free.
    async with serving(second) as (app, _channel):
        assert manager_of(app).provider.owner == owner


HOLD_LEASE = """
import sys, time
import docker
from sandbox.docker_engine import DockerEngine
from sandbox.runsc_engine import RunscEngine
from sandbox.engine import ContainerEngine
from sandbox.lease import LABEL_HOLDER, OwnerLease
from tests.sandbox_fixtures import RUNSC_ROOT
client = docker.from_env()
engine = RunscEngine(client, RUNSC_ROOT) if sys.argv[3] == "runsc" else DockerEngine(client)
OwnerLease.acquire(engine, image=sys.argv[1], owner=sys.argv[2], holder="child")
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture(params=["docker", "runsc"])
def lease_engine(request: pytest.FixtureRequest) -> tuple[str, ContainerEngine]:
    """Either engine a service holds its lease on (Docker: a container running `cat`; runsc: a
    file it keeps locked)."""
    name = str(request.param)
    return name, request.getfixturevalue(f"{name}_engine")


def test_a_killed_holder_frees_its_owner(
    lease_engine: tuple[str, ContainerEngine], sandbox_image: BuiltImage
) -> None:
    name, engine = lease_engine
    owner = f"lease-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LEASE, sandbox_image.tag, owner, name],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        # What it logs first (an engine that starts may say what it swept) comes before.
        assert "held" in (line.strip() for line in iter(child.stdout.readline, ""))
        with pytest.raises(SandboxOwnerInUseError, match=r"held by another running .*child"):
            OwnerLease.acquire(engine, image=sandbox_image.tag, owner=owner, wait_s=0.5)
    finally:
        child.kill()  # SIGKILL: no clean-up of its own
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    lease = OwnerLease.acquire(engine, image=sandbox_image.tag, owner=owner)
    try:
        assert lease.holder != "child"
        assert OwnerLease.holders(engine, owner) == [lease.holder]
    finally:
        lease.release()
    assert OwnerLease.holders(engine, owner) == []
