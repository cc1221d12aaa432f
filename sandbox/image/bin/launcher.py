"""The job launcher: the first process of a sandbox the runsc engine drives, under its init.

It starts what follows its `--` (the worker) as the sandbox user, then starts the host's
commands (jobs) as their own uids, in place of a `runsc exec` each (~22 ms of a runsc process
on the host, and a process whose streams are the host's, which a checkpoint cannot keep).

It is root in the sandbox with two capabilities and no other: CAP_SETUID and CAP_SETGID,
which it needs to hand each job its uid. A job is started through `as-job` (as-job.c, with
posix_spawn: a vfork, where a fork of this process costs gVisor ~30 ms) as a uid of at least
1000 in group 1000 (never root), and that change of every uid from 0 to another clears all of
the child's capabilities before it runs anything; no_new_privs holds for the whole sandbox.
Nothing in the sandbox can reach the launcher: it listens on nothing and connects out, like
the worker, to a socket the host makes (only while it wants a channel) in a directory that
only root may enter.

Frames both ways: a header (request id: 4 bytes, kind: 1 byte, payload length: 4 bytes, big
endian), then the payload.

  host -> SPAWN  {"argv": [...], "uid": 20001, "cwd": "/workspace", "env": {...},
                  "processes": 128}  (optional: the job's RLIMIT_NPROC, set by as-job)
  host <- STDOUT / STDERR  bytes of the job's output
  host <- EXIT   {"code": 0, "left": 0}  (a signal's death as a shell says it: 128 + the
                  signal; "left": how many processes of the job's uid were still there)

A job whose channel ended (the host went away) runs on unheard, until the next host's reaper
ends it.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time

__all__ = ["Launcher", "main"]

HEADER = struct.Struct("!IBI")
SPAWN, STDOUT, STDERR, EXIT = 1, 2, 3, 4
AS_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "as-job")
SANDBOX_GROUP = 1000
LOWEST_UID = 1000  # the sandbox user; jobs have uids of their own above it
CHUNK = 65536
# As the worker retries its own socket (worker.mjs): counted in attempts, not on the clock.
RETRY_FAST_S, RETRY_SLOW_S, FAST_ATTEMPTS = 0.02, 0.25, 250
# What is read of a job's pipes once it has ended: what it wrote before it did.
DRAIN_CHUNKS = 64
# How long jobs the host awaits may take to end once the worker has ended.
LAST_LOOK_S = 0.25
# A process's real uid, in its /proc/<pid>/status.
REAL_UID = re.compile(rb"^Uid:\s+(\d+)", re.MULTILINE)


Process = subprocess.Popen[bytes]


class Launcher:
    def __init__(self, path: str, worker: Process) -> None:
        self.path = path
        self.worker = worker
        self.selector = selectors.DefaultSelector()
        self.connection: socket.socket | None = None
        self.received = b""
        self.failed = 0
        self.next_attempt = 0.0
        # A running job's pid -> its request id (None once its channel ended).
        self.jobs: dict[int, int | None] = {}
        # A job's pipe, while it is read: fd -> the job's pid.
        self.pipes: dict[int, int] = {}
        # A running job's pid -> its uid.
        self.uids: dict[int, int] = {}
        wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        # Nothing should hang up on the launcher (see `spawn`); if anything does, it stays.
        signal.signal(signal.SIGHUP, lambda *_: None)
        self.selector.register(wake_read, selectors.EVENT_READ, ("wake", None))

    def run(self) -> None:
        while True:
            now = time.monotonic()
            if self.next_attempt - now > RETRY_SLOW_S:  # a clock restored behind its checkpoint
                self.next_attempt = now
            if self.connection is None and now >= self.next_attempt:
                self.connect()
            timeout = None
            if self.connection is None:
                timeout = max(self.next_attempt - time.monotonic(), 0)
            for key, _ in self.selector.select(timeout):
                what, detail = key.data
                if what == "wake":
                    _drain_fd(key.fd)
                elif what == "host":
                    self.receive()
                else:
                    self.forward(key.fd, what, detail)
            self.reap()

    # -- the host's channel -------------------------------------------------------------------

    def connect(self) -> None:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
        except OSError:
            connection.close()
            self.failed += 1
            delay = RETRY_FAST_S if self.failed < FAST_ATTEMPTS else RETRY_SLOW_S
            self.next_attempt = time.monotonic() + delay
            return
        self.failed = 0
        self.connection = connection
        self.selector.register(connection, selectors.EVENT_READ, ("host", None))

    def disconnect(self) -> None:
        """The channel ended: its jobs run on unheard; the next channel is tried soon."""
        if self.connection is None:
            return
        self.selector.unregister(self.connection)
        self.connection.close()
        self.connection = None
        self.received = b""
        self.next_attempt = time.monotonic() + RETRY_FAST_S
        self.jobs = dict.fromkeys(self.jobs)

    def receive(self) -> None:
        assert self.connection is not None
        try:
            data = self.connection.recv(CHUNK)
        except OSError:
            data = b""
        if not data:
            self.disconnect()
            return
        self.received += data
        while len(self.received) >= HEADER.size:
            request, kind, length = HEADER.unpack_from(self.received)
            if len(self.received) < HEADER.size + length:
                return
            payload = self.received[HEADER.size : HEADER.size + length]
            self.received = self.received[HEADER.size + length :]
            if kind == SPAWN:
                self.spawn(request, payload)

    def send(self, request: int | None, kind: int, payload: bytes) -> None:
        if request is None or self.connection is None:
            return
        try:
            self.connection.sendall(HEADER.pack(request, kind, len(payload)) + payload)
        except OSError:
            self.disconnect()

    # -- jobs ---------------------------------------------------------------------------------

    def spawn(self, request: int, payload: bytes) -> None:
        try:
            order = json.loads(payload)
            uid = order["uid"]
            if type(uid) is not int or uid < LOWEST_UID:
                raise ValueError(f"uid {uid!r}: a job runs as the sandbox user or above it")
            argv = [str(part) for part in order["argv"]]
            env = {str(k): str(v) for k, v in order.get("env", {}).items()}
            cwd = str(order.get("cwd") or "/")
            processes = order.get("processes")
            if processes is not None and (type(processes) is not int or processes < 1):
                raise ValueError(f"a process limit of {processes!r}: a count of 1 or more")
        except (ValueError, KeyError, TypeError) as exc:
            self.refuse(request, 127, str(exc))
            return
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in (STDOUT, STDERR)]
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, pipes[0][1], 1),
            (os.POSIX_SPAWN_DUP2, pipes[1][1], 2),
        ]
        try:
            # A session of its own, as an exec's: in the launcher's process group, a job
            # stopped and then killed (the job kill does both) left the group orphaned with a
            # stopped member, and the kernel hung up on the whole group, the launcher and the
            # worker included: the sandbox ended. SIGPIPE as the job expects it (Python
            # ignores it, and what is ignored stays so across an exec).
            pid = os.posix_spawn(
                AS_JOB,
                [AS_JOB, str(uid), str(SANDBOX_GROUP), cwd, str(processes or "-"), *argv],
                env,
                file_actions=actions,
                setsid=True,
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            )
        except OSError as exc:
            for read_end, write_end in pipes:
                os.close(read_end)
                os.close(write_end)
            self.refuse(request, 127, str(exc))
            return
        self.jobs[pid] = request
        self.uids[pid] = uid
        for kind, (read_end, write_end) in zip((STDOUT, STDERR), pipes, strict=True):
            os.close(write_end)
            os.set_blocking(read_end, False)
            self.pipes[read_end] = pid
            self.selector.register(read_end, selectors.EVENT_READ, (kind, pid))

    def refuse(self, request: int, code: int, why: str) -> None:
        self.send(request, STDERR, f"the command could not start: {why}\n".encode())
        self.send(request, EXIT, json.dumps({"code": code}).encode())

    def forward(self, fd: int, kind: int, pid: int) -> None:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.send(self.jobs.get(pid), kind, data)
        else:
            self.close_pipe(fd)

    def close_pipe(self, fd: int) -> None:
        if self.pipes.pop(fd, None) is not None:
            self.selector.unregister(fd)
            os.close(fd)

    def reap(self) -> None:
        self.reap_jobs()
        code = self.worker.poll()
        if code is not None:  # the worker is the sandbox's life: it ends with it
            self.finish_jobs()
            sys.exit(128 - code if code < 0 else code)

    def finish_jobs(self) -> None:
        """A last look at the jobs the host awaits before the sandbox ends: the one that ended
        the worker (a kill of it) ends beside it and is told, not lost with the sandbox."""
        deadline = time.monotonic() + LAST_LOOK_S
        while any(request is not None for request in self.jobs.values()):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)
            self.reap_jobs()

    def reap_jobs(self) -> None:
        for pid, request in list(self.jobs.items()):
            try:
                ended, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                ended, status = pid, 0
            if ended != pid:
                continue
            del self.jobs[pid]
            # What it wrote before it ended; what its children write after goes unread.
            for fd, kind in self.pipes_of(pid):
                for _ in range(DRAIN_CHUNKS):
                    try:
                        data = os.read(fd, CHUNK)
                    except OSError:
                        break
                    if not data:
                        break
                    self.send(request, kind, data)
                self.close_pipe(fd)
            exit_code = os.waitstatus_to_exitcode(status)
            exit_code = 128 - exit_code if exit_code < 0 else exit_code
            uid = self.uids.pop(pid)
            if request is not None:
                ending = {"code": exit_code, "left": processes_of(uid)}
                self.send(request, EXIT, json.dumps(ending).encode())

    def pipes_of(self, pid: int) -> list[tuple[int, int]]:
        """The job's pipes still read: (fd, STDOUT or STDERR)."""
        found = []
        for fd, owner in self.pipes.items():
            if owner == pid:
                key = self.selector.get_key(fd)
                found.append((fd, int(key.data[0])))
        return found


def processes_of(uid: int, proc: str = "/proc") -> int:
    """How many processes run as `uid` (the host skips its kill script when a job's
    command left none: a `runsc exec` less per command). A process listed that is gone by
    the time its status is read counts too: it may have been the job's, and have forked
    after the listing (a fork bomb's processes do little else), so only a count that met no
    such process may say none is left."""
    count = 0
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/status", "rb") as status:
                found = REAL_UID.search(status.read())
        except OSError:  # it ended meanwhile: perhaps the job's, its children unlisted
            count += 1
            continue
        if found and int(found.group(1)) == uid:
            count += 1
    return count


def _drain_fd(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options = dict(zip(argv[1:split:2], argv[2:split:2], strict=True))
    uid, gid = (int(part) for part in options["--user"].split(":"))
    worker = subprocess.Popen(argv[split + 1 :], user=uid, group=gid, extra_groups=[gid])
    Launcher(options["--connect"], worker).run()


if __name__ == "__main__":
    main(sys.argv)
