"""Domain errors → gRPC status, in one table, applied by `ErrorInterceptor`."""

from __future__ import annotations

import grpc

from browser_relay import errors as relay_errors
from instance_ai.metadata import RESUME_AFTER_KEY
from sandbox import errors as sandbox_errors
from sandbox.results import ResultViewError
from server import errors
from server.core.failures import CALLER_ERRORS

__all__ = ["EXPECTED_ERRORS", "STATUS_BY_ERROR", "status_for", "trailing_metadata_for"]

# Most specific first is not needed: lookup walks each error's class hierarchy.
STATUS_BY_ERROR: dict[type[Exception], grpc.StatusCode] = {
    errors.InvalidArgumentError: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFoundError: grpc.StatusCode.NOT_FOUND,
    errors.PermissionDeniedError: grpc.StatusCode.PERMISSION_DENIED,
    errors.OutOfRangeError: grpc.StatusCode.OUT_OF_RANGE,
    errors.FailedPreconditionError: grpc.StatusCode.FAILED_PRECONDITION,
    errors.ResourceExhaustedError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.SubscriberLaggedError: grpc.StatusCode.ABORTED,
    errors.UnavailableError: grpc.StatusCode.UNAVAILABLE,
    errors.NotImplementedCapabilityError: grpc.StatusCode.UNIMPLEMENTED,
    sandbox_errors.PathEscapeError: grpc.StatusCode.PERMISSION_DENIED,
    sandbox_errors.FileTooLargeError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    sandbox_errors.WorkspaceFullError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    sandbox_errors.SandboxOwnerInUseError: grpc.StatusCode.FAILED_PRECONDITION,
    sandbox_errors.WorkspaceFileNotFoundError: grpc.StatusCode.NOT_FOUND,
    sandbox_errors.SandboxNotFoundError: grpc.StatusCode.NOT_FOUND,
    sandbox_errors.EditMismatchError: grpc.StatusCode.FAILED_PRECONDITION,
    sandbox_errors.InvalidPatternError: grpc.StatusCode.INVALID_ARGUMENT,
    sandbox_errors.FileOperationError: grpc.StatusCode.FAILED_PRECONDITION,
    sandbox_errors.SandboxUnavailableError: grpc.StatusCode.UNAVAILABLE,
    sandbox_errors.ImageBuildError: grpc.StatusCode.FAILED_PRECONDITION,
    ResultViewError: grpc.StatusCode.INVALID_ARGUMENT,
    relay_errors.DriverError: grpc.StatusCode.FAILED_PRECONDITION,
    relay_errors.BrowserGone: grpc.StatusCode.UNAVAILABLE,
    relay_errors.RelayError: grpc.StatusCode.FAILED_PRECONDITION,
    relay_errors.WireError: grpc.StatusCode.INVALID_ARGUMENT,
}

# The errors whose message is written for the caller (anything else is INTERNAL).
EXPECTED_ERRORS = CALLER_ERRORS


def status_for(error: Exception) -> grpc.StatusCode:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return grpc.StatusCode.UNKNOWN


def trailing_metadata_for(error: Exception) -> tuple[tuple[str, str], ...]:
    if isinstance(error, errors.SubscriberLaggedError):
        return ((RESUME_AFTER_KEY, str(error.last_event_id)),)
    return ()
