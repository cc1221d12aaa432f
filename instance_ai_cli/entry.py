"""The `instance-ai` executable. The commands people run on their own machines (`gateway`,
`mcp`) start without importing the service (seconds of imports they never use)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    from instance_ai_cli.mcp import LIGHT_COMMANDS, light_app

    if len(sys.argv) > 1 and sys.argv[1] in LIGHT_COMMANDS:
        light_app()
        return
    from instance_ai_cli.main import app

    app()
