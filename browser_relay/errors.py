"""Errors of the browser relay package (usable without the server).

BrowserRelayError
├── DriverError   an operation on a page that cannot be done as asked (what to change)
├── BrowserGone   the browser process exited or its pipe broke
├── RelayError    a CDP command the relay cannot carry out
└── WireError     a frame that is not a message of the relay protocol (also a ValueError)
"""

from __future__ import annotations

__all__ = ["BrowserGone", "BrowserRelayError", "DriverError", "RelayError", "WireError"]


class BrowserRelayError(Exception):
    """Root of the browser relay's errors."""


class DriverError(BrowserRelayError):
    """An operation that cannot be done as asked; the message says what to change."""


class BrowserGone(BrowserRelayError):
    """The browser process exited or its pipe broke."""


class RelayError(BrowserRelayError):
    """A command that cannot be carried out; the message is what the CDP client sees."""


class WireError(BrowserRelayError, ValueError):
    """A frame that is not a message of the protocol; the connection stays up."""
