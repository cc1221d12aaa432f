"""The container-engine seam, kept by both engines: the same calls, the same answers."""

from __future__ import annotations

import io
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import identity
from sandbox.docker_engine import DockerEngine
from sandbox.engine import ContainerEngine, ContainerGoneError, ContainerSpec
from sandbox.image.build import BuiltImage
from sandbox.image.rootfs import WORKSPACE
from sandbox.local_engine import LocalEngine
from sandbox.provider import remove_owner
from sandbox.runsc_engine import RunscEngine


@pytest.fixture(params=["docker", "runsc", "local"])
def engine(
    request: pytest.FixtureRequest, tmp_path: Path, docker_engine: DockerEngine, owner: str
) -> Iterator[tuple[ContainerEngine, str]]:
    """An engine and the image its containers run (the local engine runs no image)."""
    if request.param == "docker":
        image: BuiltImage = request.getfixturevalue("sandbox_image")
        yield docker_engine, image.tag
    elif request.param == "runsc":
        image = request.getfixturevalue("sandbox_image")
        runsc: RunscEngine = request.getfixturevalue("runsc_engine")
        yield runsc, image.tag
        remove_owner(runsc, owner)
    else:
        local = LocalEngine(tmp_path / "local")
        yield local, "local"
        remove_owner(local, owner)


def archive_of(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_container_lives_its_whole_life_through_the_seam(
    engine: tuple[ContainerEngine, str], owner: str
) -> None:
    engine_, image = engine
    volume = identity.volume_name(owner, uuid.uuid4().hex)
    labels = {identity.LABEL_OWNER: owner, identity.LABEL_THREAD: "t1"}
    engine_.create_volume(volume, labels)
    assert [v.name for v in engine_.volumes(labels={identity.LABEL_OWNER: owner})] == [volume]
    name = f"seam-{uuid.uuid4().hex[:8]}"
    made = engine_.create(
        ContainerSpec(
            name=name, image=image, labels=labels, workspace_volume=volume, working_dir=WORKSPACE
        )
    )
    # Made twice (a second caller racing the first): the same container answers.
    assert engine_.create(ContainerSpec(name=name, image=image, labels=labels)).id == made.id
    assert made.workspace_volume == volume
    started = engine_.start(made.id)
    assert started.status == "running"
    assert [c.id for c in engine_.containers({identity.LABEL_OWNER: owner})] == [made.id]
    assert engine_.containers({identity.LABEL_OWNER: owner, identity.LABEL_POOL: None}) == []

    engine_.copy_in(made.id, WORKSPACE, archive_of("note.txt", b"through the seam"))
    read = engine_.exec(made.id, ["cat", "note.txt"], workdir=WORKSPACE)
    assert (read.exit_code, read.stdout) == (0, b"through the seam")
    failed = engine_.exec(made.id, ["sh", "-c", "echo oops >&2; exit 3"], workdir=WORKSPACE)
    assert (failed.exit_code, failed.stderr) == (3, b"oops\n")
    with tarfile.open(
        fileobj=io.BytesIO(engine_.copy_out(made.id, f"{WORKSPACE}/note.txt"))
    ) as tar:
        member = tar.extractfile("note.txt")
        assert member is not None and member.read() == b"through the seam"

    renamed = f"{name}-claimed"
    assert engine_.rename(made.id, renamed)
    assert engine_.inspect(renamed) is not None and engine_.inspect(name) is None
    other = engine_.create(ContainerSpec(name=name, image=image, labels=labels))
    assert not engine_.rename(other.id, renamed)  # taken: the claim fails, nothing moves
    engine_.remove(other.id)

    engine_.remove(made.id)
    engine_.remove(made.id)  # gone already is fine
    assert engine_.inspect(made.id) is None
    with pytest.raises(ContainerGoneError):
        engine_.exec(made.id, ["true"], workdir="/")
    engine_.remove_volume(volume)
    assert engine_.volume(volume) is None


def test_a_job_dies_whole_and_nothing_else_does(
    engine: tuple[ContainerEngine, str], owner: str
) -> None:
    engine_, image = engine
    labels = {identity.LABEL_OWNER: owner}
    volume = identity.volume_name(owner, uuid.uuid4().hex)
    engine_.create_volume(volume, labels)
    box = engine_.create(
        ContainerSpec(
            name=f"jobs-{uuid.uuid4().hex[:8]}",
            image=image,
            labels=labels,
            workspace_volume=volume,
            working_dir=WORKSPACE,
        )
    )
    engine_.start(box.id)
    jobs = range(20_000, 20_010)
    job = engine_.exec_attached(
        box.id, ["sh", "-c", "setsid sleep 4301 & sleep 4302"], workdir=WORKSPACE, job=20_001
    )
    bystander = engine_.exec_attached(box.id, ["sleep", "4303"], workdir=WORKSPACE, job=20_002)
    deadline = time.monotonic() + 30
    while engine_.running_jobs(box.id, jobs) != [20_001, 20_002]:
        assert time.monotonic() < deadline, "the jobs never started"
        time.sleep(0.1)
    assert engine_.kill_job(box.id, 20_001)
    assert engine_.running_jobs(box.id, jobs) == [20_002]  # its setsid child went with it
    assert engine_.kill_job(box.id, 20_002)
    assert engine_.running_jobs(box.id, jobs) == []
    for attached in (job, bystander):
        attached.close()
    engine_.remove(box.id)
    engine_.remove_volume(volume)
