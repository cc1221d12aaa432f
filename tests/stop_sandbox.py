"""`python -m tests.stop_sandbox <container id or prefix>`: stop a sandbox from outside, as an
engine restart or the host would, whichever engine drives it (for tests written in another
language, e.g. n8n's sandbox client's, tests/sandbox_client)."""

from __future__ import annotations

import sys

from tests.sandbox_fixtures import stop_from_outside

if __name__ == "__main__":
    stop_from_outside(sys.argv[1])
