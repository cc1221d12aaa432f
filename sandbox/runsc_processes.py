"""The runsc engine's processes (`RunscEngine`'s part that runs commands in a sandbox): each
started by the sandbox's job launcher (job_launcher.py) where this process holds its channel,
else by `runsc exec --process <spec>` (a replica, a launcher that never connected, a process
that wants stdin); either way the container's environment, `HOME`, the sandbox user or the
job's uid, the container's rlimits, no capabilities. Also files in and out (tar through a
process) and the OOM killer's count taken as each process starts."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandbox.container_records import ContainerRecord, RecordStore
from sandbox.engine import (
    HOME_DIR,
    Attached,
    ContainerGoneError,
    ExecResult,
    JobLimits,
    gone_if_missing,
)
from sandbox.errors import SandboxUnavailableError
from sandbox.image.rootfs import USER_UID
from sandbox.job_launcher import JobChannel, JobLaunchers, LauncherGoneError
from sandbox.process_streams import ProcessStreams
from sandbox.runsc_cli import GONE_EXIT, is_gone, oom_kills, runs, said

__all__ = ["GONE", "RunscProcesses"]

# What a call is told when its sandbox ended under it.
GONE = (
    "the sandbox went away during the call; it was removed or stopped from outside. "
    "The next call makes it again, with the same workspace"
)


class RunscProcesses:
    """Processes in the engine's sandboxes; mixed into `RunscEngine`, which provides the
    records, the bundles, the launchers' channels and a sandbox's status."""

    _store: RecordStore
    _bundles: Path
    _launchers: JobLaunchers
    _oom_marks: dict[str, list[tuple[float, int]]]

    def _runsc(self, record: ContainerRecord) -> list[str]:
        raise NotImplementedError

    def _status(self, record: ContainerRecord, running: set[str] | None = None) -> str:
        raise NotImplementedError

    def exec(
        self,
        container_id: str,
        argv: list[str],
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        job: int | None = None,
    ) -> ExecResult:
        record, process = self._process(container_id, argv, workdir, env, job)
        launcher = self._launcher(record)
        if launcher is not None:
            try:
                return launcher.run(argv, **_launched(process))
            except LauncherGoneError:
                if _ends(record.id):
                    raise ContainerGoneError(GONE) from None
                raise
        command = self._exec_command(record, process)
        try:
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, check=False
            )
        finally:
            Path(command[-2]).unlink(missing_ok=True)
        self._raise_if_gone(record, done.returncode, done.stderr)
        return ExecResult(exit_code=done.returncode, stdout=done.stdout, stderr=done.stderr)

    def exec_attached(
        self,
        container_id: str,
        argv: list[str],
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        job: int | None = None,
        stdin: bool = False,
        limits: JobLimits | None = None,
    ) -> Attached:
        record, process = self._process(container_id, argv, workdir, env, job)
        self._mark_memory(record)
        launcher = None if stdin else self._launcher(record)
        if launcher is not None:  # it sets the limits as it starts the job
            processes = limits.processes if limits else None
            return launcher.spawn(argv, processes=processes, **_launched(process))
        if limits:
            process["args"] = limits.wrap(argv)
        command = self._exec_command(record, process)
        process_file = Path(command[-2])
        popen = self._popen(command, stdin=stdin)
        return ProcessStreams(
            popen,
            on_exit=lambda: process_file.unlink(missing_ok=True),
            says_nothing=lambda code: code == GONE_EXIT and _ends(container_id),
        )

    def out_of_memory_since(self, container_id: str, since: float) -> bool:
        """Whether the host's OOM killer struck in the sandbox's cgroup after `since`: its
        count now against the count taken when a process started at or before `since`."""
        now = oom_kills(container_id)
        if now is None:
            return False
        before = [count for when, count in self._oom_marks.get(container_id, []) if when <= since]
        return now > (before[-1] if before else 0)

    def copy_in(self, container_id: str, directory: str, archive: bytes) -> None:
        """Unpacked by the sandbox user inside the sandbox (its kernel confines the paths);
        an existing file is replaced, never followed if it is a link."""
        record, process = self._process(
            container_id, ["tar", "-x", "-p", "-f", "-", "-C", directory], directory, None, None
        )
        command = self._exec_command(record, process)
        try:
            done = subprocess.run(command, input=archive, capture_output=True, check=False)
        finally:
            Path(command[-2]).unlink(missing_ok=True)
        self._raise_if_gone(record, done.returncode, done.stderr)
        if done.returncode != 0:
            raise SandboxUnavailableError(f"copying into {directory} failed: {said(done.stderr)}")

    def copy_out(self, container_id: str, path: str) -> bytes:
        parent, name = os.path.split(path.rstrip("/")) if path != "/" else ("/", ".")
        argv = ["tar", "-c", "-f", "-", "-C", parent or "/", name]
        result = self.exec(container_id, argv, workdir="/")
        if result.exit_code != 0:
            raise SandboxUnavailableError(f"{path} could not be read: {said(result.stderr)}")
        return result.stdout

    def _process(
        self,
        container_id: str,
        argv: list[str],
        workdir: str,
        env: Mapping[str, str] | None,
        job: int | None,
    ) -> tuple[ContainerRecord, dict[str, Any]]:
        """The OCI process spec of a command in the container: its environment and `HOME`,
        the sandbox user or the job's uid, the container's limits, no capabilities."""
        record = self._store.require(container_id)
        with gone_if_missing(GONE):
            config = json.loads((self._bundles / container_id / "config.json").read_text())
        spec = config["process"]
        environment = dict(e.split("=", 1) for e in spec["env"])
        environment |= {"HOME": HOME_DIR, **(env or {})}
        uid = USER_UID if job is None else job
        process = {
            **spec,
            "user": {"uid": uid, "gid": USER_UID, "additionalGids": [USER_UID]},
            "capabilities": {},
            "args": argv,
            "env": [f"{k}={v}" for k, v in environment.items()],
            "cwd": workdir,
            "rlimits": spec["rlimits"],
        }
        return record, process

    def _exec_command(self, record: ContainerRecord, process: dict[str, Any]) -> list[str]:
        """`runsc exec --process <file> <id>`, with the process spec in a file of its own
        (the caller removes it: `command[-2]`)."""
        directory = self._bundles / record.id / "processes"
        process_file = directory / f"{os.urandom(8).hex()}.json"
        with gone_if_missing(GONE):
            directory.mkdir(exist_ok=True)
            process_file.write_text(json.dumps(process))
        return [*self._runsc(record), "exec", "--process", str(process_file), record.id]

    def _launcher(self, record: ContainerRecord) -> JobChannel | None:
        """The sandbox's job launcher, where it was made with one and this process holds
        its channel."""
        if not record.engine.get("jobLauncher"):
            return None
        return self._launchers.channel(
            record.id, self._bundles / record.id, lambda: self._status(record) == "running"
        )

    def _raise_if_gone(self, record: ContainerRecord, code: int, stderr: bytes) -> None:
        if code == GONE_EXIT and is_gone(stderr) and self._status(record) != "running":
            raise ContainerGoneError(GONE)

    @staticmethod
    def _popen(argv: list[str], *, stdin: bool) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxUnavailableError(f"could not start runsc: {exc}") from exc

    def _mark_memory(self, record: ContainerRecord) -> None:
        count = oom_kills(record.id)
        if count is not None:
            marks = self._oom_marks.setdefault(record.id, [])
            marks.append((time.time(), count))
            del marks[:-64]


def _launched(process: dict[str, Any]) -> dict[str, Any]:
    """The launcher's terms for an OCI process spec (its limits are the launcher's own)."""
    return {
        "uid": process["user"]["uid"],
        "cwd": process["cwd"],
        "env": dict(item.split("=", 1) for item in process["env"]),
    }


def _ends(container_id: str, settle_s: float = 2.0) -> bool:
    """Whether the sandbox is ending, after a `runsc exec` in it answered 128 (what it answers
    when the sandbox ends under it: removed, killed; its processes take a moment to go, and a
    command may exit 128 itself)."""
    deadline = time.monotonic() + settle_s
    while (alive := runs(container_id)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive is False
