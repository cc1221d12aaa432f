"""gRPC metadata keys of the contract (beyond the .proto files). Written by hand."""

from __future__ import annotations

__all__ = ["RESUME_AFTER_KEY"]

# Trailing metadata on an ABORTED (lagged) event stream: the event id to resume after.
RESUME_AFTER_KEY = "x-resume-after"
