"""A second Docker engine for tests of sandboxes spread over engines: its own `dockerd` with
its own socket, data root and exec root, no bridge network and no gVisor (runc alone: an
engine where the runtime setting's `auto` falls back), started and stopped by the test.

Its data root is kept under ~/.cache/instance-ai (by image tag, like the n8n cache), so the
sandbox image is copied into it (`docker save | load`, about a minute) once per image."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox import identity
from sandbox.docker_engine import DockerEngine
from sandbox.image.build import BuiltImage
from sandbox.provider import remove_owner
from tests.sandbox_fixtures import EGRESS_ROOTS, owned_containers

DATA_ROOT = Path.home() / ".cache" / "instance-ai" / "second-engine"


class SecondEngine:
    """`dockerd` on a socket of its own; `stop()` and `start()` it as a test needs."""

    def __init__(self, image: BuiltImage) -> None:
        self.image = image
        self._run = Path(tempfile.mkdtemp(prefix="iai-engine-"))
        self.socket = self._run / "docker.sock"
        self.url = f"unix://{self.socket}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        # A configuration of its own, with no runtime but runc: an engine without gVisor.
        config = self._run / "daemon.json"
        config.write_text("{}")
        log = (self._run / "dockerd.log").open("ab")
        self._process = subprocess.Popen(
            [
                shutil.which("dockerd") or "dockerd",
                "--data-root",
                str(DATA_ROOT / "data"),
                "--exec-root",
                str(self._run / "exec"),
                "--config-file",
                str(config),
                "--pidfile",
                str(self._run / "dockerd.pid"),
                "--host",
                self.url,
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-forward=false",
                "--ip-masq=false",
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(docker.errors.DockerException), self.client() as client:
                client.ping()
                return
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = (self._run / "dockerd.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the second dockerd did not start:\n{tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop it (SIGTERM, as an operator would): its containers stop with it."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @contextlib.contextmanager
    def client(self) -> Iterator[docker.DockerClient]:
        client = docker.DockerClient(base_url=self.url, timeout=300)
        try:
            yield client
        finally:
            client.close()

    def load_image(self, main: docker.DockerClient) -> None:
        """Copy the sandbox image in unless it is there; drop older sandbox images."""
        with self.client() as client:
            tags = {t for i in client.images.list() for t in i.tags}
            if self.image.tag not in tags:
                stream = main.images.get(self.image.tag).save(named=True)
                client.images.load(stream)  # streamed: the image is over a gigabyte
            for old in tags - {self.image.tag}:
                if old.startswith("instance-ai-sandbox"):
                    with contextlib.suppress(docker.errors.APIError):
                        client.images.remove(old)

    def remove_owner(self, owner: str) -> None:
        """Remove the owner's containers here, with their egress directories (in /tmp for
        servers whose data directory is deep, as the tests' are)."""
        roots = sorted(Path(tempfile.gettempdir()).glob(EGRESS_ROOTS))
        with self.client() as client:
            remove_owner(DockerEngine(client), owner, roots)

    def cleanup(self) -> None:
        shutil.rmtree(self._run, ignore_errors=True)


def containers_of(client: docker.DockerClient, owner: str) -> set[str]:
    """The threads with a sandbox of `owner` on a Docker engine (the second one)."""
    found = client.containers.list(all=True, filters={"label": f"{identity.LABEL_OWNER}={owner}"})
    return {c.labels.get(identity.LABEL_THREAD, "") for c in found}


def local_threads(owner: str) -> set[str]:
    """The threads with a sandbox of `owner` on this host's engine, whichever drives it
    (runsc itself, by default, or Docker)."""
    return {c.labels.get(identity.LABEL_THREAD, "") for c in owned_containers(owner)}


@pytest.fixture
def second_engine(
    docker_client: docker.DockerClient, sandbox_image: BuiltImage, owner: str
) -> Iterator[SecondEngine]:
    """A second engine holding the sandbox image; whatever `owner` left on it is removed."""
    if os.geteuid() != 0:
        pytest.fail("a second dockerd needs root (the suite runs as root in CI)")
    engine = SecondEngine(sandbox_image)
    engine.start()
    try:
        engine.load_image(docker_client)
        yield engine
    finally:
        if not engine.running:
            engine.start()
        try:
            engine.remove_owner(owner)
        finally:
            engine.stop()
            engine.cleanup()
