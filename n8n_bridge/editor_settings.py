"""What n8n's editor reads before it shows the assistant, amended on the way through.

A stock n8n 2.41 reports its own assistant as not set up (no model, no sandbox, no web search
configured in n8n): admins would get its onboarding wizard and members no assistant at all.
With the service behind the views, the assistant *is* set up, so n8n's answers to
`GET /rest/module-settings` (the `instance-ai` entry) and `GET /rest/settings`
(`activeModules`, in case the module is switched off in n8n) say so. Nothing else of them is
touched; n8n itself is unchanged."""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.responses import Response

__all__ = ["ASSISTANT_SETTINGS", "EDITOR_SETTINGS_PATHS", "amended"]

MODULE = "instance-ai"
EDITOR_SETTINGS_PATHS = ("/rest/module-settings", "/rest/settings")

# The editor's gates (useInstanceAiAvailability): enabled, set up, the builder available. The
# computer-use gateway flags stay off: n8n's daemon (`npx @n8n/computer-use`) speaks n8n's own
# gateway protocol, not the service's (`instance-ai gateway`).
ASSISTANT_SETTINGS: dict[str, Any] = {
    "enabled": True,
    "localGatewayDisabled": True,
    "browserUseEnabled": False,
    "proxyEnabled": False,
    "cloudManaged": False,
    "setupCompleted": True,
    "sandboxEnabled": True,
    "workflowBuilderAvailable": True,
    "sandboxUnavailableReason": None,
    "runDebugEnabled": False,
    "activationCapped": False,
    "instanceAiSetupPanelEnabled": False,
}


def amended(answer: httpx.Response, path: str) -> Response:
    """n8n's answer with the assistant's entries set (any other answer as it was)."""
    headers = {
        k: v
        for k, v in answer.headers.items()
        if k.lower()
        not in ("content-length", "content-encoding", "transfer-encoding", "connection")
    }
    body = answer.content
    try:
        document = answer.json() if answer.status_code == 200 else None
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("data"), dict):
        settings = document["data"]
        if path == "/rest/module-settings":
            settings[MODULE] = {**settings.get(MODULE, {}), **ASSISTANT_SETTINGS}
        elif MODULE not in settings.get("activeModules", [MODULE]):
            settings["activeModules"] = [*settings["activeModules"], MODULE]
        body = json.dumps(document).encode()
    return Response(body, status_code=answer.status_code, headers=headers)
