"""A throwaway PostgreSQL cluster for tests: initdb into a temporary directory, listen on a
free loopback port, drop everything at the end. As root, the server runs as `postgres`."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url


def _bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise RuntimeError(
            f"PostgreSQL's {name} is not installed: run `make setup` (installs the Debian "
            "package postgresql) or set INSTANCE_AI_TEST_POSTGRES_URL to an existing server"
        )
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """A throwaway cluster: initdb into a temporary directory, a free loopback port."""

    def __init__(self) -> None:
        as_root = os.geteuid() == 0
        self._prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
        self.workdir = Path(tempfile.mkdtemp(prefix="instance-ai-pg-"))
        self._data = self.workdir / "data"
        self.port = _free_port()
        if as_root:
            shutil.chown(self.workdir, "postgres", "postgres")
        self._run(_bin("initdb"), "-D", str(self._data), "-U", "test", "--auth=trust", "-E", "UTF8")
        self.url = f"postgresql+asyncpg://test@127.0.0.1:{self.port}/instance_ai"

    def _run(self, *argv: str, check: bool = True) -> None:
        subprocess.run([*self._prefix, *argv], check=check, capture_output=True, text=True)

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.workdir} -c fsync=off"
        log = str(self.workdir / "log")
        self._run(_bin("pg_ctl"), "-D", str(self._data), "-o", options, "-w", "-l", log, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast`: connections are cut, as when a database goes away)."""
        self._run(_bin("pg_ctl"), "-D", str(self._data), "-m", mode, "-w", "stop", check=False)

    def create_database(self) -> None:
        self._run(
            _bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "test", "instance_ai"
        )

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def running_cluster() -> Iterator[Cluster]:
    """A fresh cluster with the database `instance_ai`, removed at the end."""
    cluster = Cluster()
    try:
        cluster.start()
        cluster.create_database()
        yield cluster
    finally:
        cluster.remove()


@contextlib.contextmanager
def postgres_cluster() -> Iterator[str]:
    """Yield a `postgresql+asyncpg://` URL of a fresh database."""
    existing = os.environ.get("INSTANCE_AI_TEST_POSTGRES_URL")
    if existing:
        yield existing
        return
    with running_cluster() as cluster:
        yield cluster.url


_database_numbers = itertools.count(1)


async def new_postgres_database(cluster_url: str) -> str:
    """The URL of a new, empty database on the test cluster."""
    server_url = make_url(cluster_url)
    name = f"test_{os.getpid()}_{next(_database_numbers)}"
    conn = await asyncpg.connect(
        host=server_url.host,
        port=server_url.port,
        user=server_url.username,
        database=server_url.database,
    )
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return server_url.set(database=name).render_as_string(hide_password=False)
