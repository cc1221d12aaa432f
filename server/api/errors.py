"""Domain errors → gRPC status, in one table, applied by `ErrorInterceptor`."""

from __future__ import annotations

import grpc

from server import errors

STATUS_BY_ERROR: dict[type[errors.InstanceAIError], grpc.StatusCode] = {
    errors.InvalidArgumentError: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFoundError: grpc.StatusCode.NOT_FOUND,
    errors.OutOfRangeError: grpc.StatusCode.OUT_OF_RANGE,
    errors.FailedPreconditionError: grpc.StatusCode.FAILED_PRECONDITION,
    errors.ResourceExhaustedError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.SubscriberLaggedError: grpc.StatusCode.ABORTED,
    errors.UnavailableError: grpc.StatusCode.UNAVAILABLE,
    errors.NotImplementedCapabilityError: grpc.StatusCode.UNIMPLEMENTED,
}

# Trailing metadata key carrying the event id to resume after, on ABORTED (lagged) streams.
RESUME_AFTER_KEY = "x-resume-after"


def status_for(error: errors.InstanceAIError) -> grpc.StatusCode:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return grpc.StatusCode.UNKNOWN


def trailing_metadata_for(error: errors.InstanceAIError) -> tuple[tuple[str, str], ...]:
    if isinstance(error, errors.SubscriberLaggedError):
        return ((RESUME_AFTER_KEY, str(error.last_event_id)),)
    return ()
