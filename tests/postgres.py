"""A throwaway PostgreSQL cluster for tests: initdb into a temporary directory, listen on a
free loopback port, drop everything at the end. As root, the server runs as `postgres`."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


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


@contextlib.contextmanager
def postgres_cluster() -> Iterator[str]:
    """Yield a `postgresql+asyncpg://` URL of a fresh database."""
    existing = os.environ.get("INSTANCE_AI_TEST_POSTGRES_URL")
    if existing:
        yield existing
        return
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    workdir = Path(tempfile.mkdtemp(prefix="instance-ai-pg-"))
    data = workdir / "data"
    port = _free_port()
    if as_root:
        shutil.chown(workdir, "postgres", "postgres")
    run = {"check": True, "capture_output": True, "text": True}
    subprocess.run(
        [*prefix, _bin("initdb"), "-D", str(data), "-U", "test", "--auth=trust", "-E", "UTF8"],
        **run,  # type: ignore[call-overload]
    )
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {workdir} -c fsync=off"
    subprocess.run(
        [
            *prefix,
            _bin("pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-w",
            "-l",
            str(workdir / "log"),
            "start",
        ],
        **run,  # type: ignore[call-overload]
    )
    try:
        subprocess.run(
            [
                *prefix,
                _bin("createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "test",
                "instance_ai",
            ],
            **run,  # type: ignore[call-overload]
        )
        yield f"postgresql+asyncpg://test@127.0.0.1:{port}/instance_ai"
    finally:
        subprocess.run(
            [*prefix, _bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(workdir, ignore_errors=True)
