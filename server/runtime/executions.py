"""Commands of the sandbox service API as n8n's service runs them: an execution outlives the
HTTP stream that started it, its events are numbered (`seq`) and kept, so a client that lost
its stream follows again after the last event it saw, and a known `exec_id` is followed, never
started twice.

Events: `started {exec_id}`, `stdout {data}`, `stderr {data}`, then one `exit {exit_code,
success, execution_time_ms, timed_out, killed}` or `error {error}`. Each execution keeps at
most `max_buffer_bytes` of events (the oldest output goes first; a resume from before what is
kept is `ExecutionGoneError`, HTTP 410), and a finished one is kept `retain_s`.

This registry is the process's own: an execution is served by the process that runs it (other
replicas ask it for the events: `ServiceSandboxes.follow`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from sandbox.commands import CommandResult, OutputCallback
from sandbox.errors import SandboxError
from server.errors import OutOfRangeError

__all__ = ["Execution", "ExecutionGoneError", "Executions", "Runner"]

log = structlog.get_logger(__name__)

# What starts the command: called with the output callback, returns its result.
Runner = Callable[[OutputCallback], Awaitable[CommandResult]]
# The exit code of a process ended by SIGKILL (its tree killed at a deadline or by a delete).
SIGKILLED = 137
# Output is cut into events of at most this many characters: any event then fits a message
# between replicas (a PostgreSQL notification holds 8,000 bytes, and JSON may escape a
# character into six).
MAX_EVENT_CHARS = 1024


class ExecutionGoneError(OutOfRangeError):
    """The events asked for are no longer kept (HTTP 410)."""


@dataclass(kw_only=True)
class Execution:
    sandbox_id: str
    exec_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    # The seq the next event gets; the seq of events[0] is `next_seq - len(events)`.
    next_seq: int = 0
    kept_bytes: int = 0
    finished_at: float | None = None
    task: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    _decoders: dict[str, codecs.IncrementalDecoder] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.finished_at is not None

    @property
    def first_kept_seq(self) -> int:
        return self.next_seq - len(self.events)

    def add(self, event: dict[str, Any], limit: int) -> None:
        event["seq"] = self.next_seq
        self.next_seq += 1
        self.events.append(event)
        self.kept_bytes += len(str(event.get("data", "")))
        # Drop the oldest output past the limit; `started` and the last event always stay
        # findable through their seq, a resume from before what is kept is refused (410).
        while self.kept_bytes > limit and len(self.events) > 1:
            dropped = self.events.pop(0)
            self.kept_bytes -= len(str(dropped.get("data", "")))
        # Wake every follower, then arm the event again for the next change.
        self.changed.set()
        self.changed = asyncio.Event()

    def output(self, stream: str, data: bytes, limit: int) -> None:
        # A multi-byte character split over two reads is decoded once whole.
        decoder = self._decoders.setdefault(
            stream, codecs.getincrementaldecoder("utf-8")("replace")
        )
        text = decoder.decode(data)
        for start in range(0, len(text), MAX_EVENT_CHARS):
            self.add({"type": stream, "data": text[start : start + MAX_EVENT_CHARS]}, limit)

    def after(self, seq: int, max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
        """The kept events after `seq` whose JSON fits `max_bytes` (at least one), and whether
        all of them were taken. ExecutionGoneError when events after `seq` are no longer kept."""
        if seq + 1 < self.first_kept_seq:
            raise ExecutionGoneError("execution history is no longer retained")
        taken: list[dict[str, Any]] = []
        size = 0
        for event in self.events[seq + 1 - self.first_kept_seq :]:
            size += len(json.dumps(event))
            if taken and size > max_bytes:
                return taken, False
            taken.append(event)
        return taken, True


class Executions:
    def __init__(self, *, max_buffer_bytes: int = 16 * 1024 * 1024, retain_s: float = 600.0):
        self.max_buffer_bytes = max_buffer_bytes
        self.retain_s = retain_s
        self._executions: dict[tuple[str, str], Execution] = {}

    def find(self, sandbox_id: str, exec_id: str) -> Execution | None:
        self._forget_old()
        return self._executions.get((sandbox_id, exec_id))

    def start(self, sandbox_id: str, exec_id: str, run: Runner) -> Execution:
        """Start the command in a task of its own: the stream that asked may go away."""
        execution = Execution(sandbox_id=sandbox_id, exec_id=exec_id)
        self._executions[(sandbox_id, exec_id)] = execution
        execution.add({"type": "started", "exec_id": exec_id}, self.max_buffer_bytes)
        loop = asyncio.get_running_loop()

        def on_output(stream: str, data: bytes) -> None:  # called on the runner's thread
            loop.call_soon_threadsafe(execution.output, stream, data, self.max_buffer_bytes)

        execution.task = asyncio.create_task(
            self._run(execution, run, on_output), name=f"sandbox-api-exec-{exec_id}"
        )
        return execution

    async def _run(self, execution: Execution, run: Runner, on_output: OutputCallback) -> None:
        limit = self.max_buffer_bytes
        try:
            result = await run(on_output)
        except asyncio.CancelledError:
            # Killed by a delete: the tree is dead once the runner returns (it waits for it).
            execution.add(_exit(SIGKILLED, 0, timed_out=False, killed=True), limit)
            raise
        except SandboxError as exc:
            execution.add({"type": "error", "error": str(exc)}, limit)
        except Exception:
            log.exception("a sandbox API execution failed", exec_id=execution.exec_id)
            execution.add({"type": "error", "error": "the execution failed in the service"}, limit)
        else:
            # Output read after the process ended is queued before this: flush it first.
            await asyncio.sleep(0)
            code = result.exit_code
            execution.add(
                _exit(
                    code,
                    result.duration_ms,
                    timed_out=result.timed_out,
                    killed=result.timed_out or result.cancelled or code == SIGKILLED,
                ),
                limit,
            )
        finally:
            execution.finished_at = time.monotonic()

    async def follow(
        self, execution: Execution, *, after: int = -1, follow: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """The events after seq `after`; with `follow`, until the exit or error event."""
        execution.after(after, 0)  # ExecutionGoneError before anything is streamed
        sent = after
        while True:
            changed = execution.changed
            first = execution.first_kept_seq
            if sent + 1 < first:
                return  # overtaken while this follower waited: the rest is gone (ends early)
            for event in execution.events[sent + 1 - first :]:
                sent = event["seq"]
                yield event
            if execution.done and sent + 1 >= execution.next_seq:
                return
            if not follow:
                return
            await changed.wait()

    async def kill(self, sandbox_id: str, exec_id: str) -> None:
        """Kill the execution's tree (if it still runs) and forget it; nothing to kill is fine."""
        execution = self._executions.pop((sandbox_id, exec_id), None)
        if execution is not None:
            await _cancel(execution)

    async def kill_all(self, sandbox_id: str) -> None:
        await self._kill_each([k for k in self._executions if k[0] == sandbox_id])

    def running(self, sandbox_id: str) -> int:
        return sum(
            1 for (sid, _), e in self._executions.items() if sid == sandbox_id and not e.done
        )

    async def close(self) -> None:
        await self._kill_each(list(self._executions))

    async def _kill_each(self, keys: list[tuple[str, str]]) -> None:
        """Kill the executions side by side: each kill is a command in its sandbox (a
        second or more on a busy machine), and a sandbox may have dozens running."""
        await asyncio.gather(*(self.kill(*key) for key in keys))

    def _forget_old(self) -> None:
        oldest = time.monotonic() - self.retain_s
        for key, execution in list(self._executions.items()):
            if execution.finished_at is not None and execution.finished_at < oldest:
                del self._executions[key]


async def _cancel(execution: Execution) -> None:
    task = execution.task
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _exit(code: int, duration_ms: int, *, timed_out: bool, killed: bool) -> dict[str, Any]:
    return {
        "type": "exit",
        "exit_code": code,
        "success": code == 0 and not timed_out and not killed,
        "execution_time_ms": duration_ms,
        "timed_out": timed_out,
        "killed": killed,
    }
