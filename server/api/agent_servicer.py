"""The Agent service: translate requests to the runtime, results back to messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc

from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from server.agent import Agent
from server.api.caller import caller_of
from server.api.convert import (
    event_to_proto,
    optional_request_object,
    request_object,
    thread_message_to_proto,
    thread_status_to_proto,
    thread_to_proto,
)
from server.core.caller import Caller
from server.core.validation import check_chat_message, check_thread_id, parse_cursor
from server.errors import InvalidArgumentError
from server.runtime.attachments import Attachment, check_attachments
from server.runtime.background import BackgroundTasks
from server.runtime.events import EventLog
from server.runtime.thread_directory import ThreadDirectory
from server.runtime.thread_history import ThreadHistory
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
        directory: ThreadDirectory,
        history: ThreadHistory,
        background: BackgroundTasks,
        settings: Settings,
    ) -> None:
        self._agent = agent
        self._events = events
        self._threads = threads
        self._directory = directory
        self._history = history
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
        caller = caller_of(context)
        await self._directory.check_access(request.thread_id, caller, allow_new=True)
        run_id = await self._agent.send_message(
            request.thread_id,
            request.message,
            request.message_id,
            caller=caller,
            attachments=attachments,
        )
        return agent_pb2.SendMessageResponse(run_id=run_id)

    async def StreamEvents(
        self, request: agent_pb2.StreamEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[agent_pb2.StreamEventsResponse]:
        after = parse_cursor(request.after)
        await self._own(request.thread_id, context)
        stream = self._events.subscribe(request.thread_id, after=after, follow=request.follow)
        async with aclosing(stream):
            async for event in stream:
                yield agent_pb2.StreamEventsResponse(event=event_to_proto(event))

    async def Confirm(
        self, request: agent_pb2.ConfirmRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ConfirmResponse:
        if not request.request_id:
            raise InvalidArgumentError("request_id is required: the requestId of the card")
        answer = request_object(request.resume_json, "resume_json")
        # Without a thread the card names its own, and only its asker may answer it.
        caller = (
            await self._own(request.thread_id, context) if request.thread_id else caller_of(context)
        )
        run_id = await self._agent.confirm(
            request.thread_id, request.request_id, answer, caller=caller
        )
        return agent_pb2.ConfirmResponse(run_id=run_id)

    async def CancelRun(
        self, request: agent_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CancelRunResponse:
        await self._own(request.thread_id, context)
        run_id = await self._agent.cancel_run(request.thread_id)
        return agent_pb2.CancelRunResponse(run_id=run_id or "", cancelled=run_id is not None)

    async def CancelTask(
        self, request: agent_pb2.CancelTaskRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CancelTaskResponse:
        _check_task_id(request.task_id)
        await self._own(request.thread_id, context)
        cancelled = await self._background.cancel_anywhere(request.thread_id, request.task_id)
        return agent_pb2.CancelTaskResponse(cancelled=cancelled)

    async def CorrectTask(
        self, request: agent_pb2.CorrectTaskRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CorrectTaskResponse:
        _check_task_id(request.task_id)
        if not request.correction.strip():
            raise InvalidArgumentError("correction is empty: say what the task should change")
        await self._own(request.thread_id, context)
        result = await self._background.correct_anywhere(
            request.thread_id, request.task_id, request.correction
        )
        return agent_pb2.CorrectTaskResponse(result=result)

    async def GetThreadStatus(
        self, request: agent_pb2.GetThreadStatusRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.GetThreadStatusResponse:
        await self._own(request.thread_id, context)
        status = await self._threads.status(request.thread_id)
        return thread_status_to_proto(status)

    async def DeleteThread(
        self, request: agent_pb2.DeleteThreadRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.DeleteThreadResponse:
        await self._own(request.thread_id, context)  # NOT_FOUND before stopping work
        await self._agent.forget_thread(request.thread_id)
        await self._threads.delete(request.thread_id)
        return agent_pb2.DeleteThreadResponse()

    async def CreateThread(
        self, request: agent_pb2.CreateThreadRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CreateThreadResponse:
        metadata = optional_request_object(request.metadata_json, "metadata_json")
        thread, created = await self._directory.open(
            request.thread_id, caller_of(context), metadata
        )
        return agent_pb2.CreateThreadResponse(thread=thread_to_proto(thread), created=created)

    async def GetThread(
        self, request: agent_pb2.GetThreadRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.GetThreadResponse:
        thread = await self._directory.get(request.thread_id, caller_of(context))
        return agent_pb2.GetThreadResponse(thread=thread_to_proto(thread))

    async def ListThreads(
        self, request: agent_pb2.ListThreadsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListThreadsResponse:
        page = await self._directory.list(
            caller_of(context),
            page_size=request.page_size or 30,
            page_token=request.page_token,
            search=request.search,
        )
        return agent_pb2.ListThreadsResponse(
            threads=[thread_to_proto(t) for t in page.threads],
            next_page_token=page.next_page_token or "",
        )

    async def UpdateThread(
        self, request: agent_pb2.UpdateThreadRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.UpdateThreadResponse:
        thread = await self._directory.update(
            request.thread_id,
            caller_of(context),
            title=request.title if request.HasField("title") else None,
            metadata=optional_request_object(request.metadata_json, "metadata_json"),
        )
        return agent_pb2.UpdateThreadResponse(thread=thread_to_proto(thread))

    async def ListMessages(
        self, request: agent_pb2.ListMessagesRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListMessagesResponse:
        thread = await self._directory.get(request.thread_id, caller_of(context))
        messages = await self._history.messages(
            request.thread_id, page_size=request.page_size or 50, page=request.page
        )
        return agent_pb2.ListMessagesResponse(
            messages=[thread_message_to_proto(m) for m in messages],
            last_event_id=thread.last_event_id,
        )

    async def _own(self, thread_id: str, context: grpc.aio.ServicerContext) -> Caller:
        """The caller, once the thread is known to exist and not be another user's."""
        caller = caller_of(context)
        await self._directory.check_access(thread_id, caller, allow_new=False)
        return caller


def _check_task_id(task_id: str) -> None:
    if not task_id:
        raise InvalidArgumentError("task_id is required (from GetThreadStatus.background_tasks)")
