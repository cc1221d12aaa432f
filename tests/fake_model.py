"""A local stand-in for the Anthropic Messages API (the one part of the system tests cannot
reach). It speaks the real wire format — `POST /v1/messages`, streaming server-sent events
with text and `tool_use` blocks — replays scripted assistant turns, and refuses what the real
API refuses, with the real error shape:

* a tool whose `input_schema` is not `type: object`, or has `anyOf`/`oneOf`/`allOf` at the root;
* a tool name outside `^[a-zA-Z0-9_-]{1,64}$`, or two tools with one name;
* a `tool_use` without its `tool_result` in the next message, or a `tool_result` whose
  `tool_use` is not in the previous message; empty messages or text blocks;
* with extended thinking on: a budget under 1024 or not below `max_tokens`; a tool-use loop
  whose last assistant message does not start with its thinking block; a thinking block
  whose signature is not one this stand-in issued (thinking sent back must be unchanged).

A turn's `thinking` blocks are streamed (thinking and signature deltas) only to a request
that turned thinking on, as the real model thinks only then.

Turns can also fail on purpose: an HTTP error status, a stream that dies midway, or a stream
that waits (held) until the test releases it or the client goes away.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ids = itertools.count(1)


@dataclass(kw_only=True)
class Turn:
    """One scripted assistant message."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    # None, or "die" (the connection drops mid-stream), or an HTTP status to answer with.
    fault: str | int | None = None
    # Streams the first text delta, then waits for this event (or the client to leave).
    hold: asyncio.Event | None = None

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(b["type"] == "tool_use" for b in self.blocks) else "end_turn"


def text(value: str) -> Turn:
    return Turn(blocks=[{"type": "text", "text": value}])


def thinking(value: str) -> dict[str, Any]:
    """A thinking block for a Turn (its signature is issued when it is streamed)."""
    return {"type": "thinking", "thinking": value}


def tool(name: str, arguments: dict[str, Any], *, say: str = "", call_id: str = "") -> Turn:
    return Turn(
        blocks=[*([{"type": "text", "text": say}] if say else []), use(name, arguments, call_id)]
    )


def use(name: str, arguments: dict[str, Any] | str, call_id: str = "") -> dict[str, Any]:
    """A tool_use block; a str `arguments` is sent as raw (possibly malformed) JSON."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "type": "tool_use",
        "id": call_id or f"toolu_{next(_ids):06d}",
        "name": name,
        "raw": raw,
    }


Responder = Callable[[dict[str, Any]], Turn | None]


class FakeMessagesAPI:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.rejected: list[str] = []
        self.aborted = 0
        self._script: list[Turn] = []
        # Consulted first for every request; None falls through to the script.
        self.responder: Responder | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""
        self._signatures: set[str] = set()

    def script(self, *turns: Turn) -> None:
        self._script.extend(turns)

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/_test/script", self._script_turns)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _script_turns(self, request: web.Request) -> web.Response:
        """Test control for tests in other processes (not the Messages API): appends
        `{"turns": [...]}`, each turn `{"text": ...}`, `{"tool": name, "args": {...}}` or
        `{"fault": status}`; answers how many turns are left."""
        for turn in (await request.json())["turns"]:
            if "tool" in turn:
                self.script(tool(turn["tool"], turn.get("args", {}), say=turn.get("text", "")))
            elif "fault" in turn:
                self.script(Turn(fault=turn["fault"]))
            else:
                self.script(text(turn["text"]))
        return web.json_response({"remaining": self.remaining})

    # -- the endpoint ---------------------------------------------------------------------

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not (request.headers.get("x-api-key") or bearer):
            return _error(401, "authentication_error", "x-api-key header is required")
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error(400, "invalid_request_error", "the request body is not valid JSON")
        problem = request_problem(body) or self._signature_problem(body)
        if problem is not None:
            self.rejected.append(problem)
            return _error(400, "invalid_request_error", problem)
        self.requests.append(body)
        turn = self.responder(body) if self.responder else None
        if turn is None:
            if not self._script:
                return _error(400, "invalid_request_error", "fake: no scripted turn left")
            turn = self._script.pop(0)
        if not body.get("thinking"):  # the model thinks only when asked to
            turn = replace(turn, blocks=[b for b in turn.blocks if b["type"] != "thinking"])
        turn = replace(turn, blocks=[self._signed(b) for b in turn.blocks])
        if isinstance(turn.fault, int):
            kinds = {429: "rate_limit_error", 529: "overloaded_error"}
            return _error(turn.fault, kinds.get(turn.fault, "api_error"), "scripted failure")
        if not body.get("stream"):
            return web.json_response(_message(body, turn))
        return await self._stream(request, body, turn)

    def _signed(self, block: dict[str, Any]) -> dict[str, Any]:
        if block["type"] != "thinking":
            return block
        signature = f"sig_{next(_ids):06d}"
        self._signatures.add(signature)
        return block | {"signature": signature}

    def _signature_problem(self, body: dict[str, Any]) -> str | None:
        for index, message in enumerate(body["messages"]):
            content = message.get("content")
            for position, block in enumerate(content if isinstance(content, list) else []):
                signed = block.get("signature") in self._signatures
                if block.get("type") == "thinking" and not signed:
                    return (
                        f"messages.{index}.content.{position}: Invalid `signature` in "
                        "`thinking` block"
                    )
        return None

    async def _stream(
        self, request: web.Request, body: dict[str, Any], turn: Turn
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        message = _message(body, turn) | {"content": [], "stop_reason": None}

        async def send(kind: str, data: dict[str, Any]) -> None:
            await response.write(
                f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()
            )

        try:
            await send("message_start", {"message": message})
            for index, block in enumerate(turn.blocks):
                if block["type"] == "text":
                    await send(
                        "content_block_start",
                        {"index": index, "content_block": {"type": "text", "text": ""}},
                    )
                    for piece in _pieces(block["text"]):
                        await send(
                            "content_block_delta",
                            {"index": index, "delta": {"type": "text_delta", "text": piece}},
                        )
                        if turn.hold is not None and not await self._held(request, turn.hold):
                            return response
                        if turn.fault == "die":
                            assert request.transport is not None
                            request.transport.close()  # mid-stream, no message_stop
                            return response
                elif block["type"] == "thinking":
                    await send(
                        "content_block_start",
                        {"index": index, "content_block": {"type": "thinking", "thinking": ""}},
                    )
                    for piece in _pieces(block["thinking"]):
                        delta = {"type": "thinking_delta", "thinking": piece}
                        await send("content_block_delta", {"index": index, "delta": delta})
                    delta = {"type": "signature_delta", "signature": block["signature"]}
                    await send("content_block_delta", {"index": index, "delta": delta})
                else:
                    start = {
                        "type": "tool_use",
                        "id": block["id"],
                        "name": block["name"],
                        "input": {},
                    }
                    await send("content_block_start", {"index": index, "content_block": start})
                    for piece in _pieces(block["raw"], 16):
                        await send(
                            "content_block_delta",
                            {
                                "index": index,
                                "delta": {"type": "input_json_delta", "partial_json": piece},
                            },
                        )
                await send("content_block_stop", {"index": index})
            if turn.fault == "die":
                assert request.transport is not None
                request.transport.close()
                return response
            await send(
                "message_delta",
                {
                    "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": 10},
                },
            )
            await send("message_stop", {})
        except (ConnectionResetError, asyncio.CancelledError):
            self.aborted += 1
            raise
        return response

    async def _held(self, request: web.Request, hold: asyncio.Event) -> bool:
        """Wait for the release; False when the client went away first."""
        while not hold.is_set():
            if request.transport is None or request.transport.is_closing():
                self.aborted += 1
                return False
            await asyncio.sleep(0.02)
        return True


def _pieces(value: str, size: int = 8) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def _message(body: dict[str, Any], turn: Turn) -> dict[str, Any]:
    content = []
    for block in turn.blocks:
        if block["type"] == "tool_use":
            content.append(
                {
                    "type": "tool_use",
                    "id": block["id"],
                    "name": block["name"],
                    "input": _object(block["raw"]),
                }
            )
        else:
            content.append(block)
    return {
        "id": f"msg_{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": turn.stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": len(json.dumps(body)) // 4, "output_tokens": 10},
    }


def _object(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {}  # only a streamed turn can carry malformed input


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(
        {"type": "error", "error": {"type": kind, "message": message}}, status=status
    )


# -- the request rules --------------------------------------------------------------------


def request_problem(body: Any) -> str | None:
    """The first thing the real API would refuse in this request, in its words."""
    if not isinstance(body, dict):
        return "body: Input should be an object"
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: Field required"
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        return "max_tokens: Input should be greater than or equal to 1"
    return (
        tool_problem(body.get("tools", []))
        or message_problem(body["messages"])
        or thinking_problem(body)
    )


def thinking_problem(body: dict[str, Any]) -> str | None:
    config = body.get("thinking")
    if not config:
        return None
    budget = config.get("budget_tokens")
    if config.get("type") != "enabled" or not isinstance(budget, int):
        return "thinking: Input tag does not match the expected tags ('enabled', 'disabled')"
    if budget < 1024:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    if body["max_tokens"] <= budget:
        return "`max_tokens` must be greater than `thinking.budget_tokens`"
    messages = body["messages"]
    last = messages[-1]
    in_tool_loop = isinstance(last.get("content"), list) and any(
        b.get("type") == "tool_result" for b in last["content"]
    )
    if in_tool_loop and len(messages) > 1:
        index = len(messages) - 2
        first = messages[index]["content"][0]
        if first.get("type") not in ("thinking", "redacted_thinking"):
            return (
                f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                f"but found `{first.get('type')}`. When `thinking` is enabled, a final "
                "`assistant` message must start with a thinking block."
            )
    return None


def tool_problem(tools: list[dict[str, Any]]) -> str | None:
    names: set[str] = set()
    for index, definition in enumerate(tools):
        where = f"tools.{index}.custom"
        name = definition.get("name", "")
        if not NAME.match(name):
            return f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        if name in names:
            return f"tools: Tool names must be unique. Duplicate: {name}"
        names.add(name)
        schema = definition.get("input_schema")
        if not isinstance(schema, dict):
            return f"{where}.input_schema: Field required"
        if "type" not in schema:
            return f"{where}.input_schema.type: Field required"
        if schema["type"] != "object":
            return f"{where}.input_schema.type: Input should be 'object'"
        if any(k in schema for k in ("anyOf", "oneOf", "allOf")):
            return (
                f"{where}.input_schema: input_schema does not support oneOf, allOf, or anyOf "
                "at the top level"
            )
    return None


def message_problem(messages: list[dict[str, Any]]) -> str | None:
    if not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return "messages.0.role: the first message must use the user role"
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if not content:
            return (
                f"messages.{index}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if any(b.get("type") == "text" and not b.get("text") for b in blocks):
            return "messages: text content blocks must be non-empty"
        problem = _pairing_problem(messages, index, blocks)
        if problem:
            return problem
    return None


def _pairing_problem(
    messages: list[dict[str, Any]], index: int, blocks: list[dict[str, Any]]
) -> str | None:
    message = messages[index]
    if message["role"] == "assistant":
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if not uses:
            return None
        following = messages[index + 1] if index + 1 < len(messages) else None
        answered = set()
        if following is not None and isinstance(following.get("content"), list):
            answered = {
                b.get("tool_use_id") for b in following["content"] if b.get("type") == "tool_result"
            }
        missing = [u for u in uses if u not in answered]
        if missing and following is not None:
            return (
                f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        return None
    previous = messages[index - 1] if index > 0 else None
    used = set()
    if previous is not None and isinstance(previous.get("content"), list):
        used = {b.get("id") for b in previous["content"] if b.get("type") == "tool_use"}
    for position, block in enumerate(blocks):
        if block.get("type") == "tool_result" and block.get("tool_use_id") not in used:
            return (
                f"messages.{index}.content.{position}: unexpected `tool_use_id` found in "
                f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` block "
                "must have a corresponding `tool_use` block in the previous message."
            )
    return None
