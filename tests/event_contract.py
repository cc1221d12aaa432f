"""n8n's event contract, checked: events in n8n's shape (`instance_ai.events.n8n_event`)
validated by `instanceAiEventSchema` of `@n8n/api-types` (pinned in tests/contract, installed
by `make contract`) in a Node process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from instance_ai.events import n8n_event
from instance_ai.v1 import events_pb2

__all__ = ["invalid_events"]

CONTRACT = Path(__file__).resolve().parent / "contract"


def invalid_events(events: list[events_pb2.Event]) -> list[dict[str, Any]]:
    """The events the contract refuses: {index, type, issues} each."""
    shaped = [n8n_event(e) for e in events]
    if not (CONTRACT / "node_modules" / "@n8n" / "api-types").is_dir():
        raise AssertionError("n8n's event contract is not installed; run `make contract`")
    result = subprocess.run(
        ["node", str(CONTRACT / "validate-events.mjs")],
        input=json.dumps(shaped),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found: list[dict[str, Any]] = json.loads(result.stdout)
    # Beyond the schema's strings: n8n's editor files each event under its agent. (The run
    # may be empty: a direct tool call, Tools.CallTool, is made outside any run.)
    found += [
        {"index": i, "type": e["type"], "issues": ["agentId: empty"]}
        for i, e in enumerate(shaped)
        if not e["agentId"]
    ]
    for invalid in found:
        invalid["event"] = shaped[invalid["index"]]
    return found
