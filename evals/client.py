"""The calls an evaluation makes, over the public gRPC contract only.

A transport failure (the server unreachable, or gone mid-call) raises `TransportError`, which
the runner counts against the server and answers by moving the case elsewhere. Any other
status is the service's answer about the case and is reported as such.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from evals.errors import NoModelError, TransportError
from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    pipeline_pb2,
    pipeline_pb2_grpc,
    tools_pb2,
    tools_pb2_grpc,
)
from instance_ai_client.connection import ClientConfig

__all__ = ["DEFAULT_ANSWER", "Conversation", "EvalClient", "cooperative_answer"]

T = TypeVar("T")

# The default answer to an agent's question when the case's script has nothing left to say.
DEFAULT_ANSWER = "Use your best judgement and carry on."


@dataclass(kw_only=True)
class Conversation:
    """What came of a scripted conversation."""

    built_workflow_ids: list[str] = field(default_factory=list)
    run_statuses: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class EvalClient:
    """One server's stubs on one channel."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._channel = config.channel()
        self._tools = tools_pb2_grpc.ToolsStub(self._channel)
        self._pipeline = pipeline_pb2_grpc.PipelineStub(self._channel)
        self._agent = agent_pb2_grpc.AgentStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def healthy(self) -> bool:
        try:
            reply = await self._health.Check(health_pb2.HealthCheckRequest(), timeout=5.0)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    async def call_tool(self, thread: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = await _rpc(
            lambda: self._tools.CallTool(
                tools_pb2.CallToolRequest(
                    thread_id=thread, tool_name=name, arguments_json=to_json(arguments)
                ),
                metadata=self.config.metadata(),
            )
        )
        return from_json(reply.result_json)

    async def write_file(self, thread: str, path: str, content: str) -> None:
        # Through the tool: a tool call starts the thread when it is new.
        await self.call_tool(thread, "workspace_write_file", {"path": path, "content": content})

    async def build(self, thread: str, path: str) -> dict[str, Any]:
        reply = await _rpc(
            lambda: self._pipeline.BuildWorkflow(
                pipeline_pb2.BuildWorkflowRequest(thread_id=thread, file_path=path),
                metadata=self.config.metadata(),
            )
        )
        return json_format.MessageToDict(reply, always_print_fields_with_no_presence=True)

    async def verify(
        self,
        thread: str,
        workflow_id: str,
        *,
        input_data: Any,
        trigger: str | None,
        fixtures: dict[str, list[dict[str, Any]]],
    ) -> dict[str, Any]:
        request = pipeline_pb2.VerifyWorkflowRequest(
            thread_id=thread,
            workflow_id=workflow_id,
            trigger_node_name=trigger or "",
            fixture_overrides_json=to_json(fixtures),
        )
        if input_data is not None:
            # The field holds an object; anything else travels as {"value": ...} like the tool's.
            data = input_data if isinstance(input_data, dict) else {"value": input_data}
            request.input_data_json = to_json(data)
        reply = await _rpc(
            lambda: self._pipeline.VerifyWorkflow(request, metadata=self.config.metadata())
        )
        return from_json(reply.result_json)

    async def node_output(
        self, thread: str, execution_ids: list[str], node: str
    ) -> list[list[Any]] | None:
        """The node's items per output in the first of the executions where it ran."""
        for execution_id in execution_ids:
            try:
                found = await self.call_tool(
                    thread, "get-node-output", {"executionId": execution_id, "nodeName": node}
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.NOT_FOUND:
                    continue
                raise
            return [list(items) for items in found.get("data") or []]
        return None

    async def delete_thread(self, thread: str) -> None:
        await _rpc(
            lambda: self._agent.DeleteThread(
                agent_pb2.DeleteThreadRequest(thread_id=thread),
                metadata=self.config.metadata(),
                timeout=60,
            )
        )

    async def converse(self, thread: str, turns: list[str]) -> Conversation:
        """Send the user turns one at a time, each once the thread is idle (its run, follow-up
        runs and background tasks finished), answering the agent's cards the way a cooperative
        user would, and collect the workflows it built."""
        said = Conversation()
        pending = list(turns)
        build_calls: set[str] = set()
        await self._send(thread, pending.pop(0))
        async for event in self._events(thread):
            payload = from_json(event.payload_json)
            if event.type == "tool-call" and payload.get("toolName") == "build-workflow":
                build_calls.add(str(payload.get("toolCallId")))
            elif event.type == "tool-result" and payload.get("toolCallId") in build_calls:
                result = payload.get("result") or {}
                if isinstance(result, dict) and result.get("success"):
                    said.built_workflow_ids.append(str(result["workflowId"]))
            elif event.type == "confirmation-request":
                await self._answer(thread, payload, pending)
            elif event.type == "error":
                said.errors.append(str(payload.get("content") or payload.get("message") or ""))
            elif event.type == "run-finish":
                said.run_statuses.append(str(payload.get("status", "")))
                if await self._busy(thread):
                    continue  # a follow-up run or a background task is still working
                if not pending:
                    return said
                await self._send(thread, pending.pop(0))
        return said

    async def _busy(self, thread: str) -> bool:
        status = await _rpc(
            lambda: self._agent.GetThreadStatus(
                agent_pb2.GetThreadStatusRequest(thread_id=thread),
                metadata=self.config.metadata(),
            )
        )
        return bool(status.has_active_run) or any(
            task.status == "running" for task in status.background_tasks
        )

    async def _send(self, thread: str, text: str) -> str:
        try:
            reply = await _rpc(
                lambda: self._agent.SendMessage(
                    agent_pb2.SendMessageRequest(thread_id=thread, message=text),
                    metadata=self.config.metadata(),
                )
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.FAILED_PRECONDITION and "model" in (
                exc.details() or ""
            ):
                raise NoModelError(exc.details() or "no model is configured") from None
            raise
        return str(reply.run_id)

    async def _events(self, thread: str) -> AsyncIterator[Any]:
        stream = self._agent.StreamEvents(
            agent_pb2.StreamEventsRequest(thread_id=thread, follow=True),
            metadata=self.config.metadata(),
        )
        try:
            async for reply in stream:
                yield reply.event
        except grpc.aio.AioRpcError as exc:
            raise _transport(exc) from None
        finally:
            stream.cancel()

    async def _answer(self, thread: str, card: dict[str, Any], pending: list[str]) -> None:
        resume = cooperative_answer(card, pending)
        await _rpc(
            lambda: self._agent.Confirm(
                agent_pb2.ConfirmRequest(
                    thread_id=thread, request_id=str(card["requestId"]), resume_json=to_json(resume)
                ),
                metadata=self.config.metadata(),
            )
        )


def cooperative_answer(card: dict[str, Any], pending: list[str]) -> dict[str, Any]:
    """Approve what asks for approval; answer questions with the next scripted user turn (it is
    used up); decline what an evaluation cannot give (network access, credentials, setup)."""
    kind = card.get("inputType", "approval")
    if kind in ("questions", "text"):
        reply = pending.pop(0) if pending else DEFAULT_ANSWER
        if kind == "text":
            return {"kind": "approval", "approved": True, "userInput": reply}
        return {
            "kind": "questions",
            "answers": [{"questionId": q["id"], "customText": reply} for q in card["questions"]],
        }
    if "domainAccess" in card:
        return {"kind": "domainAccessDeny"}
    if "credentialRequests" in card:
        return {"kind": "approval", "approved": False}
    if "setupRequests" in card:
        skipped = [r["nodeName"] for r in card["setupRequests"]]
        return {"kind": "setupWorkflowApply", "skippedNodes": skipped}
    return {"kind": "approval", "approved": True}


async def _rpc(call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except grpc.aio.AioRpcError as exc:
        raise _transport(exc) from None


def _transport(exc: grpc.aio.AioRpcError) -> BaseException:
    """A lost connection becomes a TransportError; the service's own answers pass through."""
    if exc.code() is grpc.StatusCode.UNAVAILABLE:
        return TransportError(f"{exc.code().name}: {exc.details()}")
    error: BaseException = exc
    return error
