"""The host side of the in-sandbox worker (`image/bin/worker.mjs`).

One attached process per sandbox stays open (`exec_attached` with stdin); requests are JSON
lines with ids, so many calls share it (~1 ms each, against ~60 ms for a fresh exec). A
reader thread parses the engine's frames and resolves each request's future. A heartbeat
keeps the idle socket alive (the engine's connection dies silently after about a minute of
silence). If the worker dies, pending calls fail with `WorkerGoneError`; the caller starts a
new one or falls back to the exec path.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from concurrent.futures import Future
from typing import Any

import structlog

from sandbox import errors
from sandbox.engine import (
    LIVENESS_CHECK_S,
    STDERR,
    STDOUT,
    Attached,
    ContainerEngine,
    WorkerHeldError,
    WorkerHost,
    is_running,
)
from sandbox.files import FileEntry
from sandbox.image.rootfs import APP_DIR, WORKSPACE
from sandbox.search import (
    MAX_OUTPUT_BYTES,
    TIMEOUT_S,
    GrepQuery,
    GrepResult,
    grep_argv,
    read_grep_output,
)

__all__ = [
    "CALL_TIMEOUT_S",
    "FILE_OPERATION_CODES",
    "HEARTBEAT_S",
    "HOST_GUARD_S",
    "RECYCLE_MB",
    "THREAD_LOAD_S",
    "WORKER_SOCKET",
    "WORKER_SOCKET_DIR",
    "WorkerClient",
    "WorkerGoneError",
    "result_of",
    "worker_environment",
    "worker_main_command",
]

log = structlog.get_logger(__name__)

WORKER_SCRIPT = f"{APP_DIR}/bin/worker.mjs"
# Where a sandbox whose main process is the worker finds the host's socket (WorkerHost).
WORKER_SOCKET_DIR = "/run/instance-ai-worker"
WORKER_SOCKET = f"{WORKER_SOCKET_DIR}/worker.sock"
HEARTBEAT_S = 20.0
CALL_TIMEOUT_S = 30.0
# How much longer than an operation's own deadline the host waits for its answer: the sandbox
# enforces the deadline and reports, the host only guards against a stuck sandbox.
HOST_GUARD_S = 1.0
# A fresh compile or engine thread may first spend up to this loading its modules (ops.mjs
# LOAD_TIMEOUT_MS): not charged to the operation's deadline, so the host allows for it too.
THREAD_LOAD_S = 120.0
# The worker's memory (RSS) past which it ends its compile and engine threads for fresh ones.
# After 100 builds it holds ~110 MB, after 1,000 ~125 MB (`python -m bench.sandbox`).
RECYCLE_MB = 400
_ERRORS: dict[str, type[errors.SandboxError]] = {
    "escape": errors.PathEscapeError,
    "missing": errors.WorkspaceFileNotFoundError,
    "not_a_file": errors.WorkspaceFileNotFoundError,
    "too_large": errors.FileTooLargeError,
    "mismatch": errors.EditMismatchError,
    "workspace_full": errors.WorkspaceFullError,
}


# What a service sandbox's file operation may be refused for (fsapi.mjs), beside the above.
FILE_OPERATION_CODES = frozenset({"exists", "not_empty", "is_dir", "not_dir", "invalid", "denied"})


class WorkerGoneError(errors.SandboxUnavailableError):
    """The worker process or its stream is gone; start another."""


def worker_environment(recycle_mb: int = RECYCLE_MB) -> dict[str, str]:
    return {"WORKER_RECYCLE_MB": str(recycle_mb)}


def worker_main_command() -> list[str]:
    """The main process of a sandbox on a WorkerHost engine: the worker, connecting out."""
    return ["node", WORKER_SCRIPT, "--connect", WORKER_SOCKET]


def result_of(reply: dict[str, Any]) -> Any:
    """The result of an operation's reply (worker or `run-op.mjs`), or its error raised."""
    if reply.get("ok"):
        return reply.get("result")
    error = reply.get("error") or {}
    code, message = str(error.get("code")), error.get("message", "the sandbox operation failed")
    if code in FILE_OPERATION_CODES:
        raise errors.FileOperationError(code, message)
    raise _ERRORS.get(code, errors.SandboxUnavailableError)(message)


class WorkerClient:
    def __init__(
        self, engine: ContainerEngine, container_id: str, *, recycle_mb: int = RECYCLE_MB
    ) -> None:
        self._engine = engine
        self._container_id = container_id
        self._recycle_mb = recycle_mb
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()
        self._alive = False
        self._ready: Future[Any] = Future()
        self._pending[0] = self._ready
        self._stop = threading.Event()
        self._attached: Attached | None = None  # the worker's streams, until released

    @classmethod
    def start(
        cls, engine: ContainerEngine, container_id: str, *, recycle_mb: int = RECYCLE_MB
    ) -> WorkerClient:
        worker = cls(engine, container_id, recycle_mb=recycle_mb)
        worker._open()
        return worker

    @property
    def alive(self) -> bool:
        return self._alive

    def _open(self) -> None:
        try:
            if isinstance(self._engine, WorkerHost):  # the sandbox's main process
                try:
                    self._attached = self._engine.worker_channel(self._container_id, CALL_TIMEOUT_S)
                except WorkerHeldError:  # by a replica: a worker of our own, as on Docker
                    log.info("the sandbox's worker serves another process; starting another")
            if self._attached is None:
                self._attached = self._engine.exec_attached(
                    self._container_id,
                    ["node", WORKER_SCRIPT],
                    workdir=WORKSPACE,
                    env=worker_environment(self._recycle_mb),
                    stdin=True,
                )
        except errors.SandboxUnavailableError as exc:
            raise WorkerGoneError(f"the worker could not start: {exc}") from exc
        self._alive = True
        threading.Thread(target=self._read, name="sandbox-worker-reader", daemon=True).start()
        try:
            self._ready.result(timeout=CALL_TIMEOUT_S)
        except Exception as exc:
            self.close()
            raise WorkerGoneError(f"the worker did not come up: {exc}") from exc
        threading.Thread(target=self._heartbeat, name="sandbox-worker-beat", daemon=True).start()

    def call(self, op: str, timeout_s: float = CALL_TIMEOUT_S, **args: Any) -> Any:
        if not self._alive:
            raise WorkerGoneError("the worker is not running")
        request_id = next(self._ids)
        future: Future[Any] = Future()
        line = json.dumps({"id": request_id, "op": op, **args}).encode() + b"\n"
        broke: OSError | None = None
        with self._lock:
            self._pending[request_id] = future
            try:
                if self._attached is None:
                    raise OSError("the stream was released")
                self._attached.socket.sendall(line)
            except OSError as exc:
                broke = exc
        if broke is not None:  # failed outside the lock: _fail_all takes it too
            self._fail_all(f"the worker stream broke: {broke}")
            raise WorkerGoneError(f"the worker stream broke: {broke}") from broke
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                wait = min(LIVENESS_CHECK_S, max(deadline - time.monotonic(), 0.0))
                return future.result(timeout=wait)
            except TimeoutError:
                pass
            if time.monotonic() >= deadline:
                with self._lock:
                    self._pending.pop(request_id, None)
                raise WorkerGoneError(f"the worker did not answer {op} in {timeout_s} s")
            # A stopped sandbox can leave the worker's stream open (under gVisor): ask.
            if not is_running(self._engine, self._container_id):
                self._fail_all("the sandbox stopped")
                raise WorkerGoneError(f"the sandbox stopped while the worker ran {op}")

    # -- file operations ------------------------------------------------------------------

    def read_file(self, path: str, *, max_bytes: int) -> bytes:
        result = self.call("read", path=path, maxBytes=max_bytes)
        return base64.b64decode(result["content"])

    def write_file(self, path: str, data: bytes, *, max_bytes: int) -> int:
        content = base64.b64encode(data).decode()
        return int(self.call("write", path=path, content=content, maxBytes=max_bytes)["bytes"])

    def str_replace(
        self, path: str, old: str, new: str, *, replace_all: bool, max_bytes: int
    ) -> int:
        result = self.call(
            "strReplace", path=path, old=old, new=new, replaceAll=replace_all, maxBytes=max_bytes
        )
        return int(result["replacements"])

    def list_files(
        self, path: str, *, recursive: bool, max_entries: int
    ) -> tuple[list[FileEntry], bool]:
        result = self.call("list", path=path, recursive=recursive, maxEntries=max_entries)
        entries = [
            FileEntry(path=e["path"], type=e["type"], size=int(e["size"]))
            for e in result["entries"]
        ]
        return sorted(entries, key=lambda e: e.path), bool(result["truncated"])

    def grep(self, query: GrepQuery) -> GrepResult:
        result = self.call(
            "grep",
            timeout_s=TIMEOUT_S + CALL_TIMEOUT_S,
            path=query.path,
            argv=grep_argv(query),
            maxBytes=MAX_OUTPUT_BYTES,
            timeoutMs=TIMEOUT_S * 1000,
        )
        stdout = base64.b64decode(result["stdout"])
        stderr = str(result["stderr"]).encode()
        return read_grep_output(query, int(result["code"]), stdout, stderr, cut=bool(result["cut"]))

    # -- plumbing -------------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        attached = self._attached
        try:
            if attached is None:
                return
            for stream_id, data in attached.frames():
                if stream_id == STDERR:
                    log.warning("sandbox worker stderr", text=data.decode(errors="replace"))
                    continue
                if stream_id != STDOUT:
                    continue
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._deliver(line)
        except (OSError, ValueError) as exc:
            log.info("sandbox worker stream ended", reason=str(exc))
        finally:
            self._fail_all("the worker exited")
            self._release()

    def _deliver(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("sandbox worker sent a bad line", line=line[:200])
            return
        with self._lock:
            future = self._pending.pop(message.get("id"), None)
        if future is None or future.done():
            return
        try:
            future.set_result(result_of(message))
        except errors.SandboxError as exc:
            future.set_exception(exc)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.call("ping", timeout_s=10)
            except errors.SandboxError:
                return

    def _fail_all(self, reason: str) -> None:
        self._alive = False
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(WorkerGoneError(reason))

    def close(self) -> None:
        """End the worker (stdin EOF makes it exit; a sandbox's main worker waits for the next
        channel instead) and release the stream."""
        self._alive = False
        self._release()

    def _release(self) -> None:
        """Close the stream's response, wrapper and socket (idempotent)."""
        self._stop.set()
        with self._lock:
            attached, self._attached = self._attached, None
        if attached is not None:
            attached.close()
