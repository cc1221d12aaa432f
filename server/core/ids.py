"""Generated identifiers."""

from __future__ import annotations

import secrets
import string

__all__ = ["new_id"]

_ALPHABET = string.ascii_letters + string.digits


def new_id(prefix: str) -> str:
    """A random id such as `run_V1StGXR8Z5jdHi6BmyTb2`: prefix, underscore, 21 characters."""
    return prefix + "_" + "".join(secrets.choice(_ALPHABET) for _ in range(21))
