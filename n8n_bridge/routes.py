"""n8n's `/rest/instance-ai/*` routes, served from the service: each checks the n8n user as
n8n's controller does (a session, the `instanceAi:message` scope), makes the call as that
user, and answers in n8n's shapes and statuses (see docs/n8n-editor.md for what differs).
The event stream is `event_stream.py`; routes the service has no counterpart for answer as
n8n does for a disabled feature."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import grpc
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from instance_ai.events import n8n_event
from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import agent_pb2
from n8n_bridge.answers import BridgeHttpError, data, error, from_rpc, timestamp_iso
from n8n_bridge.bodies import (
    ChatBody,
    ConfirmBody,
    CorrectBody,
    FeedbackBody,
    FileAttachment,
    RenameBody,
    ThreadBody,
    parse,
    query_int,
)
from n8n_bridge.guard import Guard
from n8n_bridge.history import Said, next_event_id, rich_messages
from n8n_bridge.n8n_user import N8nUser
from n8n_bridge.service import Service
from n8n_bridge.sessions import Sessions
from n8n_bridge.setting_routes import SettingRoutes

__all__ = ["Routes", "unavailable"]

log = structlog.get_logger(__name__)

NOT_YOURS = "Not authorized for this thread"
NO_THREAD = "Thread not found"
RUN_ACTIVE = "A run is already active for this thread"
NO_CARD = "Confirmation request not found or not authorized"


class Routes:
    def __init__(self, service: Service, sessions: Sessions, *, model_name: str) -> None:
        self._service = service
        self._guard = Guard(sessions)
        self._settings = SettingRoutes(service, model_name=model_name)

    def table(self) -> list[BaseRoute]:
        """In n8n's declaration order (`/threads/history` before `/threads/{id}`)."""
        guard = self._guard
        return [
            Route("/chat/{thread_id}", guard(self.chat), methods=["POST"]),
            Route("/chat/{thread_id}/cancel", guard(self.cancel), methods=["POST"]),
            Route(
                "/chat/{thread_id}/tasks/{task_id}/cancel",
                guard(self.cancel_task),
                methods=["POST"],
            ),
            Route(
                "/chat/{thread_id}/tasks/{task_id}/correct",
                guard(self.correct_task),
                methods=["POST"],
            ),
            Route("/confirm/{request_id}", guard(self.confirm), methods=["POST"]),
            Route("/feedback/{thread_id}/{response_id}", guard(self.feedback), methods=["POST"]),
            Route("/threads", guard(self.threads), methods=["GET"]),
            Route("/threads/history", guard(self.thread_history), methods=["GET"]),
            Route("/threads", guard(self.open_thread), methods=["POST"]),
            Route("/threads/{thread_id}", guard(self.thread), methods=["GET"]),
            Route("/threads/{thread_id}", guard(self.rename_thread), methods=["PATCH"]),
            Route("/threads/{thread_id}", guard(self.delete_thread), methods=["DELETE"]),
            Route("/threads/{thread_id}/messages", guard(self.messages), methods=["GET"]),
            Route("/threads/{thread_id}/status", guard(self.status), methods=["GET"]),
            *self._settings.table(guard),
        ]

    # -- runs ----------------------------------------------------------------------------

    async def chat(self, request: Request, user: N8nUser) -> Response:
        thread_id = request.path_params["thread_id"]
        body = await parse(request, ChatBody)
        if not body.message.strip() and not body.attachments:
            raise BridgeHttpError(400, "Either message or attachments must be provided")
        thread = await self._thread_or_none(thread_id, user)
        files = [a for a in body.attachments or [] if isinstance(a, FileAttachment)]
        sent = await self._service.call(
            self._service.agent.SendMessage,
            agent_pb2.SendMessageRequest(
                thread_id=thread_id,
                message=_with_references(body),
                message_id=str(uuid.uuid4()),
                attachments=[
                    agent_pb2.Attachment(name=f.fileName, mime_type=f.mimeType, data=f.decoded())
                    for f in files
                ],
            ),
            user,
            thread.project_id if thread else None,
            permission_denied=NOT_YOURS,
            failed_precondition=RUN_ACTIVE,
        )
        return data({"runId": sent.run_id})

    async def cancel(self, request: Request, user: N8nUser) -> Response:
        thread = await self._own_thread(request, user)
        await self._call(
            self._service.agent.CancelRun,
            agent_pb2.CancelRunRequest(thread_id=thread.thread_id),
            user,
            thread,
        )
        return data({"ok": True})

    async def cancel_task(self, request: Request, user: N8nUser) -> Response:
        thread = await self._own_thread(request, user)
        await self._call(
            self._service.agent.CancelTask,
            agent_pb2.CancelTaskRequest(
                thread_id=thread.thread_id, task_id=request.path_params["task_id"]
            ),
            user,
            thread,
        )
        return data({"ok": True})

    async def correct_task(self, request: Request, user: N8nUser) -> Response:
        body = await parse(request, CorrectBody)
        thread = await self._own_thread(request, user)
        await self._call(
            self._service.agent.CorrectTask,
            agent_pb2.CorrectTaskRequest(
                thread_id=thread.thread_id,
                task_id=request.path_params["task_id"],
                correction=body.message,
            ),
            user,
            thread,
        )
        return data({"ok": True})

    async def confirm(self, request: Request, user: N8nUser) -> Response:
        body = await parse(request, ConfirmBody)
        confirmed = await self._service.call(
            self._service.agent.Confirm,
            agent_pb2.ConfirmRequest(
                request_id=request.path_params["request_id"],
                resume_json=to_json(body.model_dump(exclude_none=True)),
            ),
            user,
            not_found=NO_CARD,
            permission_denied=NO_CARD,
        )
        return data({"ok": True, "runId": confirmed.run_id} if confirmed.run_id else {"ok": True})

    async def feedback(self, request: Request, user: N8nUser) -> Response:
        body = await parse(request, FeedbackBody)
        thread = await self._own_thread(request, user)
        # n8n hands a rating to its tracing service; the service has none, so the rating is
        # written to the bridge's log (never the comment: it is the person's own text).
        log.info("feedback", thread_id=thread.thread_id, rating=body.rating)
        return data({"ok": True})

    # -- threads -------------------------------------------------------------------------

    async def threads(self, request: Request, user: N8nUser) -> Response:
        page = await self._list(user, page_size=100)
        infos = [_thread_info(t) for t in page.threads]
        more = bool(page.next_page_token)
        return data({"threads": infos, "total": len(infos), "page": 0, "hasMore": more})

    async def thread_history(self, request: Request, user: N8nUser) -> Response:
        limit = query_int(request, "limit", default=30, low=1, high=100)
        search = request.query_params.get("search", "").strip()[:500]
        page = await self._list(
            user, page_size=limit, token=request.query_params.get("cursor", ""), search=search
        )
        return data(
            {
                "threads": [_thread_info(t) for t in page.threads],
                "hasMore": bool(page.next_page_token),
                "nextCursor": page.next_page_token or None,
            }
        )

    async def open_thread(self, request: Request, user: N8nUser) -> Response:
        body = await parse(request, ThreadBody)
        if body.projectId not in user.project_ids:
            raise BridgeHttpError(403, "You do not have access to the requested project")
        metadata: dict[str, Any] = {"source": body.source, "origin": body.origin or "internal"}
        if body.sourceContext is not None:
            metadata["sourceContext"] = body.sourceContext
        opened = await self._service.call(
            self._service.agent.CreateThread,
            agent_pb2.CreateThreadRequest(
                thread_id=body.threadId or str(uuid.uuid4()), metadata_json=to_json(metadata)
            ),
            user,
            body.projectId,
            permission_denied=NOT_YOURS,
        )
        return data({"thread": _thread_info(opened.thread), "created": opened.created})

    async def thread(self, request: Request, user: N8nUser) -> Response:
        thread = await self._own_thread(request, user)
        return data({"thread": _thread_info(thread)})

    async def rename_thread(self, request: Request, user: N8nUser) -> Response:
        body = await parse(request, RenameBody)
        thread = await self._own_thread(request, user)
        update = agent_pb2.UpdateThreadRequest(thread_id=thread.thread_id)
        if body.title is not None:
            update.title = body.title
        if body.metadata:
            update.metadata_json = to_json(body.metadata)
        updated = await self._call(self._service.agent.UpdateThread, update, user, thread)
        return data({"thread": _thread_info(updated.thread)})

    async def delete_thread(self, request: Request, user: N8nUser) -> Response:
        thread = await self._own_thread(request, user)
        await self._call(
            self._service.agent.DeleteThread,
            agent_pb2.DeleteThreadRequest(thread_id=thread.thread_id),
            user,
            thread,
        )
        return data({"ok": True})

    async def messages(self, request: Request, user: N8nUser) -> Response:
        limit = query_int(request, "limit", default=50, low=1, high=200)
        page = query_int(request, "page", default=0, low=0, high=1000)
        thread = await self._own_thread(request, user)
        metadata = self._service.as_user(user, thread.project_id)
        agent = self._service.agent
        try:
            listed = await agent.ListMessages(
                agent_pb2.ListMessagesRequest(
                    thread_id=thread.thread_id, page_size=limit, page=page
                ),
                metadata=metadata,
            )
            status = await agent.GetThreadStatus(
                agent_pb2.GetThreadStatusRequest(thread_id=thread.thread_id), metadata=metadata
            )
            stream = agent.StreamEvents(
                agent_pb2.StreamEventsRequest(thread_id=thread.thread_id), metadata=metadata
            )
            events = [n8n_event(r.event) async for r in stream]
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc, not_found=NO_THREAD, permission_denied=NOT_YOURS) from None
        live = {status.active_run_id} - {""}
        live |= {t.run_id for t in status.background_tasks if t.run_id}
        said = [_said(m) for m in listed.messages]
        answer: dict[str, Any] = {"threadId": thread.thread_id}
        if thread.project_id:
            answer["projectId"] = thread.project_id
        answer["messages"] = rich_messages(said, events, live_runs=live)
        answer["nextEventId"] = next_event_id(listed.last_event_id)
        return data(answer)

    async def status(self, request: Request, user: N8nUser) -> Response:
        thread = await self._thread_or_none(request.path_params["thread_id"], user)
        if thread is None:  # n8n answers for a thread it does not have yet
            return data(
                {
                    "hasActiveRun": False,
                    "isSuspended": False,
                    "backgroundTasks": [],
                    "memoryTasks": [],
                }
            )
        status = await self._call(
            self._service.agent.GetThreadStatus,
            agent_pb2.GetThreadStatusRequest(thread_id=thread.thread_id),
            user,
            thread,
        )
        answer: dict[str, Any] = {
            "hasActiveRun": status.has_active_run,
            "isSuspended": status.is_suspended,
            "backgroundTasks": [
                {
                    "taskId": t.task_id,
                    "role": t.role,
                    "agentId": t.agent_id,
                    "status": t.status,
                    "startedAt": _millis(t.started_at),
                    **({"runId": t.run_id} if t.run_id else {}),
                }
                for t in status.background_tasks
            ],
            "memoryTasks": [],
        }
        if status.active_run_id:
            answer["runId"] = status.active_run_id
        return data(answer)

    # -- calls ---------------------------------------------------------------------------

    async def _call(
        self, method: Any, request: Any, user: N8nUser, thread: agent_pb2.Thread | None = None
    ) -> Any:
        project = thread.project_id if thread else None
        return await self._service.call(
            method, request, user, project, not_found=NO_THREAD, permission_denied=NOT_YOURS
        )

    async def _own_thread(self, request: Request, user: N8nUser) -> agent_pb2.Thread:
        thread = await self._thread_or_none(request.path_params["thread_id"], user)
        if thread is None:
            raise BridgeHttpError(404, NO_THREAD)
        return thread

    async def _thread_or_none(self, thread_id: str, user: N8nUser) -> agent_pb2.Thread | None:
        """The user's thread; None when it does not exist (403 when it is another's)."""
        try:
            found = await self._service.agent.GetThread(
                agent_pb2.GetThreadRequest(thread_id=thread_id),
                metadata=self._service.as_user(user),
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                return None
            if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:  # not an id the service takes
                return None
            raise from_rpc(exc, permission_denied=NOT_YOURS) from None
        thread: agent_pb2.Thread = found.thread
        return thread

    async def _list(
        self, user: N8nUser, *, page_size: int, token: str = "", search: str = ""
    ) -> agent_pb2.ListThreadsResponse:
        try:
            page: agent_pb2.ListThreadsResponse = await self._service.agent.ListThreads(
                agent_pb2.ListThreadsRequest(page_size=page_size, page_token=token, search=search),
                metadata=self._service.as_user(user),
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.INVALID_ARGUMENT and token:
                raise BridgeHttpError(400, "Invalid thread history cursor") from None
            raise from_rpc(exc) from None
        return page


def unavailable(request: Request) -> JSONResponse:
    """A route of n8n's assistant the service has no counterpart for (run debugging, evals,
    MCP connections, n8n's own computer-use daemon): as n8n answers a feature switched off."""
    return error(404, f"{request.url.path} is not available with this assistant")


def _thread_info(thread: agent_pb2.Thread) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": thread.thread_id,
        "resourceId": thread.owner,
        "createdAt": timestamp_iso(thread.created_at),
        "updatedAt": timestamp_iso(thread.updated_at),
    }
    if thread.title:
        info["title"] = thread.title
    metadata = from_json(thread.metadata_json) if thread.metadata_json else {}
    if metadata:
        info["metadata"] = metadata
    return info


def _said(message: agent_pb2.ThreadMessage) -> Said:
    return Said(
        id=message.id,
        role=message.role,
        run_id=message.run_id,
        message_group_id=message.message_group_id,
        text=message.text,
        created_at=timestamp_iso(message.created_at),
        attachments=[
            {"name": a.name, "mimeType": a.mime_type, "size": a.size} for a in message.attachments
        ],
    )


def _with_references(body: ChatBody) -> str:
    """The message, with what the person pointed at in the editor (a workflow, an agent, a
    node selection) named after it: the service's agent reads them from the text."""
    references = [a for a in body.attachments or [] if not isinstance(a, FileAttachment)]
    lines = [
        f"- {a.type} {a.id or a.workflowId}" + (f" ({a.name})" if a.name else "")
        for a in references
    ]
    if not lines:
        return body.message
    return body.message + "\n\nThe user pointed at:\n" + "\n".join(lines)


def _millis(text: str) -> int:
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        return 0
