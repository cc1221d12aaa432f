"""`GET /rest/instance-ai/events/{threadId}`: the thread's events as n8n's editor reads them,
server-sent: `id: <n>` on durable events only, `data:` the event in n8n's shape, `: ping`
every 15 s, resumed after the `Last-Event-ID` header (else `?lastEventId=`, else 0).

Reconnecting mid-run, the editor asks only for what came after the history it loaded, and
that history leaves out the run in progress; so before going live the stream sends, as n8n's
does, one `run-sync` frame with that run's whole agent tree. A stream the service ends
(the subscriber fell behind, a replica went away) is resumed where it stopped; the browser
sees one unbroken stream. A thread that does not exist yet is waited for, as n8n opens the
stream before the first message creates the thread."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from instance_ai.events import n8n_event
from instance_ai.metadata import RESUME_AFTER_KEY
from instance_ai.v1 import agent_pb2
from n8n_bridge.agent_tree import agent_tree
from n8n_bridge.answers import error
from n8n_bridge.n8n_user import N8nUser
from n8n_bridge.service import Metadata, Service

__all__ = ["KEEP_ALIVE_S", "EventStream"]

KEEP_ALIVE_S = 15.0
# How often a stream opened before its thread exists looks for it.
_THREAD_WAIT_S = 0.5
_HEADERS = {
    "Cache-Control": "no-cache, no-transform",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}


class EventStream:
    def __init__(self, service: Service, keep_alive_s: float = KEEP_ALIVE_S) -> None:
        self._service = service
        self._keep_alive_s = keep_alive_s

    async def handle(self, request: Request, user: N8nUser) -> Response:
        cursor = _cursor(request)
        if cursor is None:
            return error(400, "lastEventId: expected a non-negative integer")
        thread_id = request.path_params["thread_id"]
        metadata = self._service.as_user(user)
        try:
            await self._service.agent.GetThread(
                agent_pb2.GetThreadRequest(thread_id=thread_id), metadata=metadata
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.PERMISSION_DENIED:
                return error(403, "Not authorized for this thread")
            if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                return error(400, exc.details() or "not a thread id")
        frames = self._frames(thread_id, metadata, cursor, user.id)
        return StreamingResponse(
            _with_pings(frames, self._keep_alive_s),
            media_type="text/event-stream; charset=UTF-8",
            headers=_HEADERS,
        )

    async def _frames(
        self, thread_id: str, metadata: Metadata, after: int, user_id: str
    ) -> AsyncIterator[str]:
        agent = self._service.agent
        synced = False
        while True:
            try:
                if not synced:
                    for frame in await self._run_sync(thread_id, metadata, after):
                        yield frame
                    synced = True
                call = agent.StreamEvents(
                    agent_pb2.StreamEventsRequest(
                        thread_id=thread_id, after=str(after), follow=True
                    ),
                    metadata=metadata,
                )
                streamed = _LiveSegments()
                async for response in call:
                    event = response.event
                    if event.HasField("id"):
                        after = event.id
                    if streamed.shown_live(event):
                        continue
                    yield _frame(event, user_id)
                return
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code is grpc.StatusCode.NOT_FOUND:
                    await asyncio.sleep(_THREAD_WAIT_S)  # not made yet: wait for it
                elif code is grpc.StatusCode.ABORTED:
                    after = _resume_point(exc, after)
                elif code is grpc.StatusCode.OUT_OF_RANGE:
                    after = 0  # a cursor past the end: the thread is not what the page knew
                elif code is grpc.StatusCode.UNAVAILABLE:
                    await asyncio.sleep(1.0)
                else:
                    return

    async def _run_sync(self, thread_id: str, metadata: Metadata, after: int) -> list[str]:
        """A `run-sync` frame for the run in progress when the stream resumes past its start
        (the history the page loaded leaves that run out)."""
        agent = self._service.agent
        status = await agent.GetThreadStatus(
            agent_pb2.GetThreadStatusRequest(thread_id=thread_id), metadata=metadata
        )
        run_id = status.active_run_id
        if not run_id or after == 0:
            return []
        stream = agent.StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id=thread_id), metadata=metadata
        )
        events = [n8n_event(r.event) async for r in stream]
        starts = [e for e in events if e["type"] == "run-start" and e["runId"] == run_id]
        if not starts or starts[0].get("id", 0) > after:
            return []  # the replay after the cursor carries the whole run
        group = starts[0]["payload"].get("messageGroupId") or run_id
        runs = {
            e["runId"]
            for e in events
            if e["type"] == "run-start"
            and (e["payload"].get("messageGroupId") or e["runId"]) == group
        }
        mine = [e for e in events if e["runId"] in runs and e.get("id", 0) <= after]
        sync = {
            "runId": run_id,
            "messageGroupId": group,
            "runIds": sorted(runs),
            "agentTree": agent_tree(mine),
            "status": "suspended" if status.is_suspended else "active",
            "backgroundTasks": [],
        }
        return [f"event: run-sync\ndata: {json.dumps(sync)}\n\n"]


class _LiveSegments:
    """n8n's stream never sends a durable `text-block` or `reasoning-block` live: a live page
    has the text from its deltas, and a block would show it twice (its reducer folds a block
    into the deltas only while they end the timeline). So a block whose deltas this
    connection passed on is not sent again; one it did not (replayed, or a turn whose live
    stream was lost) is."""

    def __init__(self) -> None:
        self._block_of = {"text-delta": "text-block", "reasoning-delta": "reasoning-block"}
        self._open: set[tuple[str, str, str]] = set()

    def shown_live(self, event: Any) -> bool:
        block = self._block_of.get(event.type)
        if block is not None:
            self._open.add((block, event.run_id, event.agent_id))
            return False
        key = (event.type, event.run_id, event.agent_id)
        if key in self._open:
            self._open.discard(key)
            return True
        return False


def _cursor(request: Request) -> int | None:
    for raw in (request.headers.get("last-event-id"), request.query_params.get("lastEventId")):
        if raw is not None and raw.strip():
            return int(raw) if raw.strip().isdigit() else None
    return 0


def _frame(event: Any, user_id: str) -> str:
    """n8n's frame: the event as n8n sends it (its user: a thread has one, the reader)."""
    shaped = n8n_event(event)
    event_id = shaped.pop("id", None)
    shaped.pop("threadId", None)
    shaped["userId"] = user_id
    body = f"data: {json.dumps(shaped)}\n\n"
    return f"id: {event_id}\n{body}" if event_id is not None else body


def _resume_point(exc: grpc.aio.AioRpcError, after: int) -> int:
    for key, value in exc.trailing_metadata() or ():
        if key == RESUME_AFTER_KEY and str(value).isdigit():
            return int(value)
    return after


async def _with_pings(frames: AsyncIterator[str], every_s: float) -> AsyncIterator[str]:
    """The frames, with a `: ping` comment whenever nothing was sent for `every_s`."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for frame in frames:
                await queue.put(frame)
        finally:
            await queue.put(None)

    task = asyncio.create_task(pump())
    try:
        while True:
            try:
                frame = await asyncio.wait_for(queue.get(), every_s)
            except TimeoutError:
                yield ": ping\n\n"
                continue
            if frame is None:
                return
            yield frame
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
