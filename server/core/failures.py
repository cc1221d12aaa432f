"""What a caller may read of a failure. The service's own error root and the sandbox and
browser relay packages' roots carry messages written for the caller (they say what to
change); anything else is an internal error, reported as such and logged."""

from __future__ import annotations

from browser_relay.errors import BrowserRelayError
from sandbox.errors import SandboxError
from server.errors import InstanceAIError

__all__ = ["CALLER_ERRORS", "describe"]

CALLER_ERRORS: tuple[type[Exception], ...] = (InstanceAIError, SandboxError, BrowserRelayError)


def describe(exc: BaseException) -> str:
    """`exc`'s message when it was raised on purpose, else a pointer to the server log."""
    if isinstance(exc, CALLER_ERRORS):
        return str(exc)
    return "internal error (see the server log)"
