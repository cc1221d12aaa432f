"""Servers started once per test run and shared by all of pytest-xdist's workers (a real n8n
costs ~20 CPU-s to start): the first worker that needs one starts it, under a lock, and writes
how to reach it into the run's directory; the others read that. The process that ran the
session (xdist's controller, or the only process of a run without xdist) ends them all once
every worker is done (`end_run`, from conftest's `pytest_unconfigure`): a worker that finished
its share must not end a server the other still uses.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["begin_run", "end_run", "shared"]

RUN_DIRECTORY = "INSTANCE_AI_TEST_RUN_DIR"
# A shared server's record: how to reach it, and its process group to end it with.
RECORD = "{}.json"
PROCESS_GROUP = "process_group"
STOP_WAIT_S = 20.0

# Set in the process that made the run's directory: it ends the run.
_made_here: Path | None = None
# The servers this process started: their handles live as long as the process.
_started: list[subprocess.Popen[bytes]] = []


def begin_run() -> None:
    """Make the run's directory, unless this is a worker of a run that has one (xdist's
    workers inherit the controller's environment, which sets this before it starts them)."""
    global _made_here
    if RUN_DIRECTORY not in os.environ:
        _made_here = Path(tempfile.mkdtemp(prefix="instance-ai-test-run-"))
        os.environ[RUN_DIRECTORY] = str(_made_here)


def shared(
    name: str, start: Callable[[Path], tuple[dict[str, Any], subprocess.Popen[bytes]]]
) -> dict[str, Any]:
    """The record of the run's server `name`, started with `start(its directory)` by the first
    caller of the run. `start` returns what reaches it (JSON-serialisable) and its process,
    which must lead a session of its own (its process group is what the run ends)."""
    run = Path(os.environ[RUN_DIRECTORY])
    record = run / RECORD.format(name)
    with (run / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            directory = run / name
            directory.mkdir()
            made, process = start(directory)
            _started.append(process)
            staging = record.with_suffix(".partial")
            staging.write_text(json.dumps({**made, PROCESS_GROUP: process.pid}))
            staging.rename(record)
    loaded: dict[str, Any] = json.loads(record.read_text())
    return loaded


def end_run() -> None:
    """End the run's shared servers and remove its directory (in the process that made it)."""
    global _made_here
    run, _made_here = _made_here, None
    if run is None:
        return
    groups = [json.loads(path.read_text())[PROCESS_GROUP] for path in run.glob(RECORD.format("*"))]
    for group in groups:
        _signal(group, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while any(_alive(group) for group in groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    for group in groups:
        _signal(group, signal.SIGKILL)
    os.environ.pop(RUN_DIRECTORY, None)
    shutil.rmtree(run, ignore_errors=True)


def _signal(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _alive(group: int) -> bool:
    # The leader is this process's child where this process started it: reap it, or its
    # zombie would count as alive.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(group, os.WNOHANG)
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
