"""Answers in the shapes n8n's REST layer gives them: `{"data": ...}` on success, `{"code",
"message"}` for an error, and the two older shapes its auth layer still uses (401 and a
missing scope). The service's gRPC statuses become the status n8n's assistant answers for the
same condition; nothing becomes a 500."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from starlette.responses import JSONResponse

__all__ = [
    "MISSING_SCOPE",
    "BridgeHttpError",
    "data",
    "error",
    "from_rpc",
    "missing_scope",
    "timestamp_iso",
    "unauthorized",
]

MISSING_SCOPE = "User is missing a scope required to perform this action"


class BridgeHttpError(Exception):
    """An answer to send as n8n would: its status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def data(value: Any) -> JSONResponse:
    return JSONResponse({"data": value})


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def unauthorized() -> JSONResponse:
    return JSONResponse({"status": "error", "message": "Unauthorized"}, status_code=401)


def missing_scope() -> JSONResponse:
    return JSONResponse({"status": "error", "message": MISSING_SCOPE}, status_code=403)


# The service's statuses → n8n's. Where n8n's assistant has a fixed message for the condition
# (a thread of another user, a second run), the route passes it; otherwise the service's own
# message, which says what to change, is the one sent.
_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 404,
}


def from_rpc(exc: grpc.aio.AioRpcError, **messages: str) -> BridgeHttpError:
    """The HTTP answer for a failed call: `messages` keyed by status name (`not_found`,
    `permission_denied`, `failed_precondition`) replace the service's text with n8n's."""
    code = exc.code()
    status = _STATUS.get(code)
    if status is None:
        # The service unreachable, overloaded, or refusing the bridge's own key: the person can
        # only retry later, as with n8n's assistant when its model provider is down.
        return BridgeHttpError(
            503, f"The assistant's service is not answering ({code.name}); try again shortly."
        )
    return BridgeHttpError(status, messages.get(code.name.lower(), exc.details() or code.name))


def timestamp_iso(stamp: Timestamp) -> str:
    """A time as n8n's JSON gives it (JavaScript's `toISOString`: milliseconds, `Z`)."""
    return stamp.ToDatetime().isoformat(timespec="milliseconds") + "Z"
