"""The sandbox service API: n8n's sandbox service contract (`n8n-io/n8n-sandbox-service`,
docs/API.md) as its client `@n8n/sandbox-client` 0.1.1 speaks it, on a port of its own
(`INSTANCE_AI_SANDBOX_API_ADDRESS`). It translates and authorizes; the sandboxes are
`ServiceSandboxes` (server/runtime/service_sandboxes.py).

Every route but `GET /healthz` needs `X-Api-Key` (a tenant: `SandboxApiKeys`). Errors are
`{"error", "code"}` with n8n's statuses; a sandbox found dead and brought back answers 409
with `X-Sandbox-Restarted: 1` and `reason: sandbox_restarted`; past
`sandbox_api_max_inflight` requests in flight for one sandbox, 429 with `Retry-After`.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sandbox import errors as sandbox_errors
from server import errors
from server.runtime.executions import ExecutionGoneError
from server.runtime.sandbox_api_keys import SandboxApiKeys
from server.runtime.service_sandboxes import (
    SandboxRestartedError,
    ServiceSandboxes,
)
from server.store.database import storage_failure

__all__ = ["SandboxApi"]

log = structlog.get_logger(__name__)

Handler = Callable[[Request, str], Awaitable[Response]]
RETRY_AFTER_S = 1
# What a file operation refused for answers (sandbox/image/bin/fsapi.mjs's codes).
FILE_STATUS = {
    "exists": 409,
    "not_empty": 409,
    "is_dir": 400,
    "not_dir": 400,
    "invalid": 400,
    "denied": 403,
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


B = TypeVar("B", bound=_Body)


class CreateBody(_Body):
    id: str | None = None
    ephemeral: bool | None = None
    egress: str | None = None


class ExecBody(_Body):
    command: str = ""
    env: dict[str, str] | None = None
    workdir: str | None = None
    timeout_ms: int | None = None
    exec_id: str | None = None


class CopyBody(_Body):
    src: str
    dest: str
    recursive: bool = False
    overwrite: bool = False


class MoveBody(_Body):
    src: str
    dest: str
    overwrite: bool = False


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(kw_only=True)
class SandboxApi:
    sandboxes: ServiceSandboxes
    keys: SandboxApiKeys
    max_file_bytes: int
    max_inflight: int

    def __post_init__(self) -> None:
        self._inflight: Counter[str] = Counter()

    def app(self) -> Starlette:
        tenant = self._tenant_route
        sandbox = self._sandbox_route
        routes = [
            Route("/healthz", _healthz, methods=["GET"]),
            Route("/sandboxes", tenant(self._list), methods=["GET"]),
            Route("/sandboxes", tenant(self._create), methods=["POST"]),
            Route("/sandboxes/{id}", tenant(self._get), methods=["GET"]),
            Route("/sandboxes/{id}", tenant(self._delete), methods=["DELETE"]),
            Route("/sandboxes/{id}/executions", sandbox(self._exec), methods=["POST"]),
            Route("/sandboxes/{id}/executions/{exec_id}", sandbox(self._follow), methods=["GET"]),
            Route("/sandboxes/{id}/executions/{exec_id}", tenant(self._kill), methods=["DELETE"]),
            Route("/sandboxes/{id}/files", sandbox(self._list_files), methods=["GET"]),
            Route("/sandboxes/{id}/files", sandbox(self._write), methods=["PUT"]),
            Route("/sandboxes/{id}/files", sandbox(self._append), methods=["POST"]),
            Route("/sandboxes/{id}/files", sandbox(self._delete_file), methods=["DELETE"]),
            Route("/sandboxes/{id}/files/content", sandbox(self._read), methods=["GET"]),
            Route("/sandboxes/{id}/files/copy", sandbox(self._copy), methods=["POST"]),
            Route("/sandboxes/{id}/files/move", sandbox(self._move), methods=["POST"]),
            Route("/sandboxes/{id}/mkdir", sandbox(self._mkdir), methods=["POST"]),
            Route("/sandboxes/{id}/stat", sandbox(self._stat), methods=["GET"]),
        ]
        return Starlette(
            routes=routes,
            exception_handlers={HTTPException: _http_error},  # type: ignore[dict-item]
        )

    # -- guards ---------------------------------------------------------------------------

    def _tenant_route(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """The handler with the caller's tenant, every error answered in n8n's shape."""

        async def route(request: Request) -> Response:
            try:
                tenant = await self.keys.tenant_of(request.headers.get("x-api-key", ""))
                if tenant is None:
                    return _error(401, "missing or invalid API key: send X-Api-Key")
                return await handler(request, tenant)
            except Exception as exc:
                return _answer_error(exc)

        return route

    def _sandbox_route(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A route that works in a sandbox: counted against its in-flight limit (a stream
        until it ends)."""

        async def counted(request: Request, tenant: str) -> Response:
            sandbox_id = request.path_params["id"]
            if self._inflight[sandbox_id] >= self.max_inflight:
                busy = _error(
                    429,
                    f"too many requests in flight for this sandbox (at most {self.max_inflight})",
                )
                busy.headers["Retry-After"] = str(RETRY_AFTER_S)
                return busy
            self._inflight[sandbox_id] += 1
            handed_over = False
            try:
                response = await handler(request, tenant)
                if isinstance(response, StreamingResponse):
                    response.background = None
                    response.body_iterator = self._released(response.body_iterator, sandbox_id)
                    handed_over = True
                return response
            finally:
                if not handed_over:
                    self._release(sandbox_id)

        return self._tenant_route(counted)

    async def _released(self, body: AsyncIterable[Any], sandbox_id: str) -> AsyncIterator[Any]:
        try:
            async for chunk in body:
                yield chunk
        finally:
            self._release(sandbox_id)

    def _release(self, sandbox_id: str) -> None:
        self._inflight[sandbox_id] -= 1
        if self._inflight[sandbox_id] <= 0:
            del self._inflight[sandbox_id]

    # -- sandboxes ------------------------------------------------------------------------

    async def _list(self, _request: Request, tenant: str) -> Response:
        return JSONResponse([r.to_json() for r in await self.sandboxes.all(tenant)])

    async def _create(self, request: Request, tenant: str) -> Response:
        body = await _json_body(request, CreateBody, empty_ok=True)
        record, created = await self.sandboxes.create(
            tenant, body.id, ephemeral=bool(body.ephemeral), egress=body.egress
        )
        return JSONResponse(record.to_json(), status_code=201 if created else 200)

    async def _get(self, request: Request, tenant: str) -> Response:
        record = await self.sandboxes.get(tenant, request.path_params["id"])
        return JSONResponse(record.to_json())

    async def _delete(self, request: Request, tenant: str) -> Response:
        await self.sandboxes.delete(tenant, request.path_params["id"])
        return Response(status_code=204)

    # -- executions -----------------------------------------------------------------------

    async def _exec(self, request: Request, tenant: str) -> Response:
        body = await _json_body(request, ExecBody)
        exec_id, events = await self.sandboxes.exec(
            tenant,
            request.path_params["id"],
            command=body.command,
            env=body.env or {},
            workdir=body.workdir or "",
            timeout_ms=body.timeout_ms,
            exec_id=body.exec_id,
        )
        return _ndjson(events, {"X-Exec-Id": exec_id})

    async def _follow(self, request: Request, tenant: str) -> Response:
        after = _int_param(request, "after", -1)
        follow = _bool_param(request, "follow", False)
        exec_id = request.path_params["exec_id"]
        events = await self.sandboxes.follow(
            tenant, request.path_params["id"], exec_id, after=after, follow=follow
        )
        first = await anext(aiter(events), None)  # a 410 must be a status, not a cut stream
        return _ndjson(_prepend(first, events), {"X-Exec-Id": exec_id})

    async def _kill(self, request: Request, tenant: str) -> Response:
        await self.sandboxes.kill(tenant, request.path_params["id"], request.path_params["exec_id"])
        return Response(status_code=204)

    # -- files ----------------------------------------------------------------------------

    async def _op(self, request: Request, tenant: str, op: str, **args: Any) -> Any:
        return await self.sandboxes.file_op(tenant, request.path_params["id"], op, **args)

    async def _list_files(self, request: Request, tenant: str) -> Response:
        entries = await self._op(
            request,
            tenant,
            "fsList",
            path=request.query_params.get("path") or "/",
            recursive=_bool_param(request, "recursive", False),
            extension=request.query_params.get("extension", ""),
        )
        return JSONResponse(entries)

    async def _read(self, request: Request, tenant: str) -> Response:
        found = await self._op(request, tenant, "fsRead", path=_path_param(request))
        return Response(base64.b64decode(found["content"]), media_type="application/octet-stream")

    async def _write(self, request: Request, tenant: str) -> Response:
        path = _path_param(request)
        overwrite = _bool_param(request, "overwrite", True)
        data = await self._upload(request)
        await self._op(
            request, tenant, "fsWrite", path=path, content=_b64(data), overwrite=overwrite
        )
        return Response(status_code=200)

    async def _append(self, request: Request, tenant: str) -> Response:
        path = _path_param(request)
        data = await self._upload(request)
        await self._op(request, tenant, "fsWrite", path=path, content=_b64(data), append=True)
        return Response(status_code=200)

    async def _delete_file(self, request: Request, tenant: str) -> Response:
        await self._op(
            request,
            tenant,
            "fsDelete",
            path=_path_param(request),
            recursive=_bool_param(request, "recursive", False),
            force=_bool_param(request, "force", False),
        )
        return Response(status_code=204)

    async def _copy(self, request: Request, tenant: str) -> Response:
        body = await _json_body(request, CopyBody)
        await self._op(request, tenant, "fsCopy", **body.model_dump())
        return Response(status_code=200)

    async def _move(self, request: Request, tenant: str) -> Response:
        body = await _json_body(request, MoveBody)
        await self._op(request, tenant, "fsMove", **body.model_dump())
        return Response(status_code=200)

    async def _mkdir(self, request: Request, tenant: str) -> Response:
        recursive = _bool_param(request, "recursive", False)
        await self._op(request, tenant, "fsMkdir", path=_path_param(request), recursive=recursive)
        return Response(status_code=201)

    async def _stat(self, request: Request, tenant: str) -> Response:
        return JSONResponse(await self._op(request, tenant, "fsStat", path=_path_param(request)))

    async def _upload(self, request: Request) -> bytes:
        """The body, refused (413) past the upload limit without reading the rest."""
        limit = self.max_file_bytes
        declared = request.headers.get("content-length", "")
        too_large = f"the file is over the {limit}-byte upload limit"
        if declared.isdigit() and int(declared) > limit:
            raise ApiError(413, too_large)
        data = bytearray()
        async for chunk in request.stream():
            data.extend(chunk)
            if len(data) > limit:
                raise ApiError(413, too_large)
        return bytes(data)


# -- request parts ----------------------------------------------------------------------------


async def _json_body(request: Request, model: type[B], *, empty_ok: bool = False) -> B:
    raw = await request.body()
    if not raw.strip() and empty_ok:
        return model()
    try:
        return model.model_validate(json.loads(raw))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "invalid request body: not JSON") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        raise ApiError(400, f"invalid request body: {problems}") from None


def _path_param(request: Request) -> str:
    path = request.query_params.get("path", "")
    if not path:
        raise ApiError(400, "the query parameter path is required")
    return path


def _bool_param(request: Request, name: str, default: bool) -> bool:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise ApiError(400, f"the query parameter {name} is true or false")


def _int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, f"the query parameter {name} is a whole number") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- responses --------------------------------------------------------------------------------


def _ndjson(events: AsyncIterator[dict[str, Any]], headers: dict[str, str]) -> StreamingResponse:
    async def lines() -> AsyncIterator[bytes]:
        async for event in events:
            yield json.dumps(event, separators=(",", ":")).encode() + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers=headers)


async def _prepend(
    first: dict[str, Any] | None, rest: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    if first is not None:
        yield first
    async for event in rest:
        yield event


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "code": status}, status_code=status)


def _answer_error(exc: Exception) -> Response:
    if isinstance(exc, ApiError):
        return _error(exc.status, str(exc))
    if isinstance(exc, SandboxRestartedError):
        # n8n's runner writes this body: `error` and `reason`, no code.
        return JSONResponse(
            {"error": str(exc), "reason": "sandbox_restarted"},
            status_code=409,
            headers={"X-Sandbox-Restarted": "1"},
        )
    stored = storage_failure(exc)
    if stored is not None:  # the database cannot be used: transient, as on gRPC
        return _error(503, str(stored))
    if isinstance(exc, sandbox_errors.FileOperationError):
        return _error(FILE_STATUS.get(exc.code, 400), str(exc))
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return _error(status, str(exc))
    reference = uuid.uuid4().hex[:12]
    log.error("sandbox API request failed", reference=reference, exc_info=exc)
    return _error(500, f"internal error (reference {reference} in the service's log)")


_STATUS: list[tuple[type[Exception], int]] = [
    (ExecutionGoneError, 410),
    (errors.InvalidArgumentError, 400),
    (errors.NotFoundError, 404),
    (errors.PermissionDeniedError, 403),
    (errors.FailedPreconditionError, 409),
    (errors.ResourceExhaustedError, 429),
    (errors.UnavailableError, 503),
    (sandbox_errors.WorkspaceFileNotFoundError, 404),
    (sandbox_errors.FileTooLargeError, 413),
    (sandbox_errors.WorkspaceFullError, 507),
    (sandbox_errors.PathEscapeError, 403),
    (sandbox_errors.SandboxNotFoundError, 404),
    (sandbox_errors.SandboxUnavailableError, 503),
]


async def _healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _http_error(_request: Request, exc: HTTPException) -> Response:
    """Unknown routes and methods, in n8n's error shape."""
    return _error(exc.status_code, "not found" if exc.status_code == 404 else str(exc.detail))
