"""Calling `runsc` itself (the runsc engine's): its flags, whether it can be driven here, its
listing and deletion of sandboxes, the cgroup its sandboxes' limits live in, and reading what
it says when it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from sandbox.errors import SandboxUnavailableError
from sandbox.runtimes import RUNSC

__all__ = [
    "CGROUP_PARENT",
    "GONE_EXIT",
    "PIDS_CGROUPS",
    "RUNSC_CALL_S",
    "RUNSC_FLAGS",
    "call_runsc",
    "delete",
    "first_line",
    "is_gone",
    "oom_kills",
    "processes",
    "remove_cgroups",
    "running_ids",
    "runs",
    "runsc_argv",
    "runsc_usable",
    "said",
    "state_files",
    "sweep_cgroups",
    "sweep_state_roots",
]

# What every runsc call is given: no network inside gVisor either (only loopback), and host
# Unix sockets openable (the egress proxy's socket is bind-mounted into each sandbox).
RUNSC_FLAGS = ("--network=none", "--host-uds=open")
# The cgroup parent of every sandbox (one per container below it).
CGROUP_PARENT = "/instance-ai"
CGROUPS = Path("/sys/fs/cgroup")
MEMORY_CGROUPS = CGROUPS / "memory"
PIDS_CGROUPS = CGROUPS / "pids"
# How long a runsc call that manages a container (not a process in it) may take.
RUNSC_CALL_S = 120.0
# What `runsc exec` exits with when its sandbox is gone or ends under it.
GONE_EXIT = 128
# The state file runsc keeps for each container in its state root (formatted with the id).
STATE_MARK = "_sandbox:"
STATE_FILES = "{}" + STATE_MARK + "*.state"
# What runsc says when the container it was asked about does not exist or does not run.
_GONE = ("loading container", "loading sandbox", "not running", "is not running", "stopped")


def runsc_usable(runsc: str = RUNSC) -> str | None:
    """None when `runsc` can be driven here, else why not."""
    if shutil.which(runsc) is None:
        return f"{runsc} is not installed (`make setup`: scripts/install-runsc)"
    if os.geteuid() != 0:
        return "driving runsc directly needs root (its sandboxes' cgroups and namespaces)"
    return None


def runsc_argv(state: Path) -> list[str]:
    """runsc with its flags, over the state root `state` (made if missing)."""
    state.mkdir(parents=True, exist_ok=True)
    return [RUNSC, "--root", str(state), *RUNSC_FLAGS]


def call_runsc(
    argv: list[str], what: str, *, output: IO[bytes] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run a runsc call that manages a container (it is to `what`) to its end, its stdout
    and stderr captured (or both written to `output`), killed after RUNSC_CALL_S. Not
    `subprocess.run(timeout=...)`: a wait with a timeout sleeps in steps of up to 50 ms
    (Popen.wait), and each call (a restore: ~150 ms) paid half of one on average."""
    target = output or subprocess.PIPE
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=target, stderr=target) as process:
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            process.kill()

        timer = threading.Timer(RUNSC_CALL_S, expire)
        timer.daemon = True
        timer.start()
        try:
            stdout, stderr = process.communicate()
        finally:
            timer.cancel()
    if expired.is_set():
        raise SandboxUnavailableError(
            f"runsc did not {what} within {RUNSC_CALL_S:.0f} s (killed); is the host overloaded?"
        )
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def running_ids(state_roots: Iterable[Path]) -> set[str]:
    """The containers runsc says run, in the given state roots."""
    found: set[str] = set()
    for root in state_roots:
        if not root.is_dir():
            continue
        done = call_runsc([RUNSC, "--root", str(root), "list", "--format=json"], "list sandboxes")
        if done.returncode != 0:
            raise SandboxUnavailableError(f"runsc could not list sandboxes: {said(done.stderr)}")
        for entry in json.loads(done.stdout or b"[]") or []:
            if entry.get("status") == "running":
                found.add(str(entry.get("id")))
    return found


def delete(state: Path, container_id: str) -> None:
    """Kill and forget a sandbox (gone already is fine), and its cgroups. runsc is called
    only where its state names the sandbox (without it, runsc could not act on it either):
    a suspended sandbox being resumed, or one never started, costs no process (~20 ms)."""
    if not any(state.glob(STATE_FILES.format(container_id))):
        remove_cgroups(container_id)
        return
    done = call_runsc([*runsc_argv(state), "delete", "--force", container_id], "stop the sandbox")
    if done.returncode != 0 and not is_gone(done.stderr):
        raise SandboxUnavailableError(f"runsc could not stop the sandbox: {said(done.stderr)}")
    remove_cgroups(container_id)


def state_files(state: Path) -> dict[str, Path]:
    """The containers runsc keeps state for under `state` (every owner's root), by id, with
    the root each is in."""
    found: dict[str, Path] = {}
    with contextlib.suppress(OSError):
        for root in state.iterdir():
            with contextlib.suppress(OSError):
                for path in root.glob(STATE_FILES.format("*")):
                    found[path.name.split(STATE_MARK, 1)[0]] = root
    return found


def remove_cgroups(container_id: str) -> None:
    """Remove the sandbox's cgroup in every controller. runsc removes some of them (under
    cgroup v1, not all: pids, cpu and others stay, empty), so without this every sandbox
    ever made would leave a directory behind in each. One still holding a process stays."""
    for parent in _cgroup_parents():
        with contextlib.suppress(OSError):
            (parent / container_id).rmdir()


def sweep_cgroups(known: set[str], older_than_s: float = 600.0) -> int:
    """Remove the empty cgroups of sandboxes no record names (left by a service that died
    before removing its sandboxes, or by a version that did not remove them). A container's
    record exists before its cgroup and goes after it, and a cgroup that holds a process
    cannot be removed; but `known` was read a moment ago, and another process of this host
    (a replica, a test) may have made a sandbox since, whose cgroup runsc makes before it
    moves the sandbox in: only cgroups untouched for `older_than_s` go. How many were
    removed."""
    removed = 0
    cutoff = time.time() - older_than_s
    for parent in _cgroup_parents():
        with contextlib.suppress(OSError):
            for cgroup in parent.iterdir():
                if not (cgroup.is_dir() and cgroup.name not in known):
                    continue
                with contextlib.suppress(OSError):
                    if cgroup.stat().st_mtime < cutoff:
                        cgroup.rmdir()
                        removed += 1
    return removed


def sweep_state_roots(state: Path, older_than_s: float = 3600.0) -> int:
    """Remove the owners' state roots that hold nothing (each owner gets one; a test suite
    makes hundreds). Only ones untouched for `older_than_s`: runsc makes a root before it
    writes into it, so a fresh empty one may be about to be used. How many were removed."""
    removed = 0
    cutoff = time.time() - older_than_s
    with contextlib.suppress(OSError):
        for root in state.iterdir():
            with contextlib.suppress(OSError):
                if root.is_dir() and root.stat().st_mtime < cutoff:
                    root.rmdir()  # fails unless empty
                    removed += 1
    return removed


def _cgroup_parents() -> list[Path]:
    """The sandboxes' parent cgroup in cgroup v2's one hierarchy, or in each of v1's."""
    with contextlib.suppress(OSError):
        return [h / CGROUP_PARENT.strip("/") for h in [CGROUPS, *CGROUPS.iterdir()]]
    return []


def processes(container_id: str) -> list[int] | None:
    """The pids of the sandbox's processes, read from its cgroup (which holds every process
    the sandbox has on the host; an ended one leaves it at once, reaped or not): a file read
    where `runsc list` costs a process. None where this host's cgroups cannot tell."""
    hierarchy = PIDS_CGROUPS if PIDS_CGROUPS.is_dir() else CGROUPS  # cgroup v1 or v2
    parent = hierarchy / CGROUP_PARENT.strip("/")
    try:
        return [int(pid) for pid in (parent / container_id / "cgroup.procs").read_text().split()]
    except FileNotFoundError:  # gone with its sandbox, unless sandboxes get none here
        return [] if parent.is_dir() else None
    except OSError:
        return None


def runs(container_id: str) -> bool | None:
    """Whether the sandbox's processes are alive (None where this host's cgroups cannot
    tell)."""
    pids = processes(container_id)
    return None if pids is None else bool(pids)


def oom_kills(container_id: str) -> int | None:
    """How many processes the host's OOM killer took in the sandbox's memory cgroup."""
    path = MEMORY_CGROUPS / CGROUP_PARENT.strip("/") / container_id / "memory.oom_control"
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return None


def is_gone(stderr: bytes) -> bool:
    """Whether runsc said the container does not exist or does not run."""
    text = stderr.decode(errors="replace")
    return any(word in text for word in _GONE)


def first_line(output: bytes) -> str:
    """The first line of what runsc said (a failed restore adds a Go panic's stack)."""
    lines = output.decode(errors="replace").strip().splitlines()
    return lines[0][:500] if lines else "no reason given"


def said(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    return text[-500:] if text else "no reason given"
