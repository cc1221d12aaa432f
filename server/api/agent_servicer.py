"""The Agent service: translate requests to the runtime, results back to messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc

from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from server.agent import Agent
from server.api.caller import caller_of
from server.api.convert import event_to_proto, request_object, thread_status_to_proto
from server.core.validation import check_chat_message, check_thread_id, parse_cursor
from server.errors import InvalidArgumentError
from server.runtime.attachments import Attachment, check_attachments
from server.runtime.background import BackgroundTasks
from server.runtime.events import EventLog
from server.runtime.threads import Threads
from server.settings import Settings

__all__ = ["AgentServicer"]


class AgentServicer(agent_pb2_grpc.AgentServicer):
    def __init__(
        self,
        agent: Agent,
        *,
        events: EventLog,
        threads: Threads,
        background: BackgroundTasks,
        settings: Settings,
    ) -> None:
        self._agent = agent
        self._events = events
        self._threads = threads
        self._background = background
        self._limits = settings

    async def SendMessage(
        self, request: agent_pb2.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.SendMessageResponse:
        check_thread_id(request.thread_id)
        limits = self._limits
        check_chat_message(
            request.message,
            max_chars=limits.max_chat_message_chars,
            setting="INSTANCE_AI_MAX_CHAT_MESSAGE_CHARS",
        )
        attachments = [
            Attachment(name=a.name, mime_type=a.mime_type, data=a.data) for a in request.attachments
        ]
        check_attachments(
            attachments,
            max_file_bytes=limits.max_attachment_bytes,
            max_total_bytes=limits.max_attachments_bytes,
        )
        run_id = await self._agent.send_message(
            request.thread_id,
            request.message,
            request.message_id,
            caller=caller_of(context),
            attachments=attachments,
        )
        return agent_pb2.SendMessageResponse(run_id=run_id)

    async def StreamEvents(
        self, request: agent_pb2.StreamEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[agent_pb2.StreamEventsResponse]:
        after = parse_cursor(request.after)
        stream = self._events.subscribe(request.thread_id, after=after, follow=request.follow)
        async with aclosing(stream):
            async for event in stream:
                yield agent_pb2.StreamEventsResponse(event=event_to_proto(event))

    async def Confirm(
        self, request: agent_pb2.ConfirmRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ConfirmResponse:
        check_thread_id(request.thread_id)
        if not request.request_id:
            raise InvalidArgumentError("request_id is required: the requestId of the card")
        run_id = await self._agent.confirm(
            request.thread_id,
            request.request_id,
            request_object(request.resume_json, "resume_json"),
            caller=caller_of(context),
        )
        return agent_pb2.ConfirmResponse(run_id=run_id)

    async def CancelRun(
        self, request: agent_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CancelRunResponse:
        check_thread_id(request.thread_id)
        run_id = await self._agent.cancel_run(request.thread_id)
        return agent_pb2.CancelRunResponse(run_id=run_id or "", cancelled=run_id is not None)

    async def CancelTask(
        self, request: agent_pb2.CancelTaskRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CancelTaskResponse:
        check_thread_id(request.thread_id)
        _check_task_id(request.task_id)
        cancelled = await self._background.cancel_anywhere(request.thread_id, request.task_id)
        return agent_pb2.CancelTaskResponse(cancelled=cancelled)

    async def CorrectTask(
        self, request: agent_pb2.CorrectTaskRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CorrectTaskResponse:
        check_thread_id(request.thread_id)
        _check_task_id(request.task_id)
        if not request.correction.strip():
            raise InvalidArgumentError("correction is empty: say what the task should change")
        result = await self._background.correct_anywhere(
            request.thread_id, request.task_id, request.correction
        )
        return agent_pb2.CorrectTaskResponse(result=result)

    async def GetThreadStatus(
        self, request: agent_pb2.GetThreadStatusRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.GetThreadStatusResponse:
        status = await self._threads.status(request.thread_id)
        return thread_status_to_proto(status)

    async def DeleteThread(
        self, request: agent_pb2.DeleteThreadRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.DeleteThreadResponse:
        check_thread_id(request.thread_id)
        await self._threads.status(request.thread_id)  # NOT_FOUND before stopping work
        await self._agent.forget_thread(request.thread_id)
        await self._threads.delete(request.thread_id)
        return agent_pb2.DeleteThreadResponse()


def _check_task_id(task_id: str) -> None:
    if not task_id:
        raise InvalidArgumentError("task_id is required (from GetThreadStatus.background_tasks)")
