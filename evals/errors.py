"""Errors of the evaluation runner.

EvalError
├── RunError             the run cannot start as asked (a usage problem, with what to change)
├── TransportError       the server could not be reached or went away mid-call
├── NoModelError         the server has no model configured: prompt cases cannot run there
├── LanesExhaustedError  every server has been unreachable for the whole abort window
└── RowsFileError        the rows file cannot be used
"""

from __future__ import annotations

__all__ = [
    "EvalError",
    "LanesExhaustedError",
    "NoModelError",
    "RowsFileError",
    "RunError",
    "TransportError",
]


class EvalError(Exception):
    """Root of the evaluation runner's errors."""


class RunError(EvalError):
    """The run cannot start as asked (a usage problem, with what to change)."""


class TransportError(EvalError):
    """The server could not be reached or went away mid-call."""


class NoModelError(EvalError):
    """The server has no model configured: prompt cases cannot run there."""


class LanesExhaustedError(EvalError):
    """Every server has been unreachable for the whole abort window."""


class RowsFileError(EvalError):
    """The rows file cannot be used."""
