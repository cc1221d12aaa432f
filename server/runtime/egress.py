"""What a sandbox may reach through its egress proxy (`sandbox/egress.py`): the SSRF rules of
`server/domain/egress.py`, then the thread's approvals (the `fetchUrl` permission, and the hosts
approved through fetch-url's domain cards)."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from sandbox.egress import EgressDenied, Policy
from server.domain.egress import EgressRefused, check
from server.runtime.hitl import Hitl
from server.settings import Settings

__all__ = ["MAX_ROOT_CHARS", "egress_policy", "egress_root"]

# Unix socket paths must stay under ~108 bytes: deep data directories move the root to /tmp.
MAX_ROOT_CHARS = 60


def egress_root(settings: Settings) -> Path:
    """Where each container's egress directory is created."""
    root = settings.data_dir / "egress"
    if len(str(root)) <= MAX_ROOT_CHARS:
        return root
    digest = hashlib.sha256(str(settings.data_dir).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"instance-ai-egress-{digest}"


def egress_policy(settings: Settings, hitl: Hitl) -> Policy:
    allow = frozenset(settings.web_fetch_allow_hosts)

    async def policy(thread_id: str, host: str, port: int) -> str:
        literal = f"[{host}]" if ":" in host else host
        try:
            target = await check(f"http://{literal}:{port}/", allow=allow)
        except EgressRefused as refused:
            raise EgressDenied(str(refused).removeprefix("url: ")) from None
        mode = await hitl.mode(thread_id, "fetchUrl")
        if mode == "blocked":
            raise EgressDenied("outbound requests are blocked on this server (fetchUrl: blocked)")
        if mode != "always_allow" and not await hitl.domain_allowed(thread_id, target.host):
            raise EgressDenied(
                f"{target.host} is not approved for this thread; the user approves hosts "
                "through fetch-url"
            )
        return target.address

    return policy
