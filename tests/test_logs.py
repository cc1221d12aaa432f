"""What the server log prints of an unexpected error: where it happened, never the values
its frames held."""

from __future__ import annotations

import subprocess
import sys

import pytest

SECRET = "sk-planted-0123456789abcdef"

PROGRAM = f"""
import structlog
from server.logs import configure_logging

configure_logging(log_format={{log_format!r}})

def unseal():
    decrypted = {SECRET!r}
    raise RuntimeError("cannot use the credential")

try:
    unseal()
except RuntimeError:
    structlog.get_logger("test").exception("unexpected error in RPC")
"""


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_tracebacks_name_the_frames_but_never_print_their_locals(log_format: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(log_format=log_format)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "unseal" in result.stderr  # the traceback is there
    assert "cannot use the credential" in result.stderr
    assert SECRET not in result.stderr + result.stdout
