"""Errors raised by the service's domain code.

One root, one subclass per kind of failure a caller can act on. The gRPC layer maps each kind
to a status code in a single table (`server/api/grpc_status.py`); domain code never sees gRPC.

    InstanceAIError
    ├── InvalidArgumentError    the request is malformed: change it
    ├── NotFoundError           the thing named does not exist
    ├── PermissionDeniedError   the instance refused: a missing scope or licence
    ├── OutOfRangeError         a position (cursor, offset) lies past the end
    ├── FailedPreconditionError the system is not in a state that allows this now
    ├── ResourceExhaustedError  a size or count limit was hit
    ├── SubscriberLaggedError   a live subscriber fell behind; reconnect from its cursor
    ├── UnavailableError        the service is shutting down or a dependency is down
    └── NotImplementedCapabilityError  the capability has not landed yet

Messages are written for the caller: they say what to change. So are those of the
sandbox and browser relay packages' own roots (`server/core/failures.py` names the three).
This module imports nothing: every layer may raise these, and each front keeps its own table
of what they mean there (a gRPC status, an HTTP status, an MCP error result).
"""

from __future__ import annotations

__all__ = [
    "FailedPreconditionError",
    "InstanceAIError",
    "InvalidArgumentError",
    "NotFoundError",
    "NotImplementedCapabilityError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "SubscriberLaggedError",
    "UnavailableError",
]


class InstanceAIError(Exception):
    """Root of every error the service raises on purpose."""


class InvalidArgumentError(InstanceAIError):
    pass


class NotFoundError(InstanceAIError):
    pass


class PermissionDeniedError(InstanceAIError):
    pass


class OutOfRangeError(InstanceAIError):
    pass


class FailedPreconditionError(InstanceAIError):
    pass


class ResourceExhaustedError(InstanceAIError):
    pass


class UnavailableError(InstanceAIError):
    pass


class SubscriberLaggedError(InstanceAIError):
    """A live subscriber's buffer overflowed; it can resume after `last_event_id`."""

    def __init__(self, message: str, *, last_event_id: int) -> None:
        super().__init__(message)
        self.last_event_id = last_event_id


class NotImplementedCapabilityError(InstanceAIError):
    """An RPC or tool whose capability has not been built yet."""

    def __init__(self, capability: str) -> None:
        super().__init__(f"not implemented yet: this needs {capability}")
        self.capability = capability
