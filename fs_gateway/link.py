"""MCP messages over a WebSocket, in either role. The gateway connects out to the service
and then *serves* MCP on that connection while the service is the client, so neither of
the SDK's transports fits; this carries the SDK's own messages (JSON-RPC, one per text
frame) between a socket and the SDK's message streams — the protocol stays the SDK's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["Streams", "message_streams"]

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception],
    MemoryObjectSendStream[SessionMessage],
]


@contextlib.asynccontextmanager
async def message_streams(
    receive: Callable[[], Awaitable[str]],
    send: Callable[[str], Awaitable[None]],
    ended: anyio.Event,
) -> AsyncIterator[Streams]:
    """The SDK's (read, write) streams over a socket's `receive` and `send`. `ended` is set
    when the socket ends (the session then fails its calls in flight)."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](16)

    async def inbound() -> None:
        try:  # until the socket closes
            with contextlib.suppress(Exception):
                async with read_writer:
                    while True:
                        text = await receive()
                        try:
                            message = types.JSONRPCMessage.model_validate_json(text)
                        except ValidationError as exc:
                            await read_writer.send(exc)
                            continue
                        await read_writer.send(SessionMessage(message))
        finally:
            ended.set()

    async def outbound() -> None:
        try:
            with contextlib.suppress(Exception):
                async with write_reader:
                    async for message in write_reader:
                        dumped = message.message.model_dump_json(by_alias=True, exclude_none=True)
                        await send(dumped)
        finally:
            ended.set()

    async with anyio.create_task_group() as group:
        group.start_soon(inbound)
        group.start_soon(outbound)
        try:
            yield read_stream, write_stream
        finally:
            group.cancel_scope.cancel()
