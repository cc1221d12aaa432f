"""What a sandbox may reach through its egress proxy (`sandbox/egress.py`).

- A thread's sandbox: the SSRF rules of `server/domain/egress.py`, then the thread's approvals
  (the `fetchUrl` permission, and the hosts approved through fetch-url's domain cards).
- A service sandbox (the sandbox service API), as n8n's own service: any public address (private
  and reserved ranges refused), or only the configured hosts, or nothing; plus the operator's
  trusted hosts at any address (an internal registry mirror), in every mode but none.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import structlog

from sandbox.egress import EgressDenied, Policy
from server.domain.egress import EgressRefused, check
from server.runtime.hitl import Hitl
from server.settings import Settings, SettingsError

__all__ = [
    "MAX_ROOT_CHARS",
    "NPM_REGISTRY",
    "egress_policy",
    "egress_root",
    "npm_registry",
    "service_egress_policy",
    "trusted_hosts",
]

log = structlog.get_logger(__name__)

# In the settings: the registry this machine's npm uses (`npm config get registry`).
NPM_REGISTRY = "npm"

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


def npm_registry(settings: Settings) -> str | None:
    """The npm registry service sandboxes use: the setting, where `npm` means the one this
    machine's npm is configured with (read now, never written down)."""
    configured = settings.sandbox_api_npm_registry
    if configured != NPM_REGISTRY:
        return configured or None
    npm = shutil.which("npm")
    if npm is None:
        log.warning("no npm on this machine: service sandboxes use npm's default registry")
        return None
    found = subprocess.run(
        [npm, "config", "get", "registry"], capture_output=True, text=True, timeout=30, check=False
    ).stdout.strip()
    if not found.startswith(("http://", "https://")):
        raise SettingsError(f"`npm config get registry` gave no registry URL: {found[:200]!r}")
    return found


def trusted_hosts(settings: Settings, registry: str | None) -> frozenset[str]:
    """Hosts (or host:port pairs) service sandboxes reach at any address: the setting, `npm`
    read as this machine's registry host, and the registry the sandboxes use."""
    hosts = set()
    for entry in settings.sandbox_api_trusted_hosts:
        if entry == NPM_REGISTRY:
            url = npm_registry(settings.model_copy(update={"sandbox_api_npm_registry": "npm"}))
            entry = urlsplit(url or "").hostname or ""
        if entry:
            hosts.add(entry.lower())
    if registry:
        host = urlsplit(registry).hostname
        if host:
            hosts.add(host.lower())
    return frozenset(hosts)


def service_egress_policy(
    settings: Settings, trusted: frozenset[str], egress_of: Callable[[str], Awaitable[str]]
) -> Policy:
    """The policy of service sandboxes; `egress_of(key)` is the sandbox's own mode (`none`
    refuses everything, whatever the service allows)."""
    mode = settings.sandbox_api_egress
    listed = frozenset(h.lower() for h in settings.sandbox_api_egress_hosts)

    async def policy(key: str, host: str, port: int) -> str:
        host = host.lower()
        if mode == "none" or await egress_of(key) == "none":
            raise EgressDenied("this sandbox has no network access (egress: none)")
        literal = f"[{host}]" if ":" in host else host
        is_trusted = host in trusted or f"{host}:{port}" in trusted
        if not is_trusted and mode == "hosts" and host not in listed:
            raise EgressDenied(f"{host} is not one of the hosts service sandboxes may reach")
        allow = frozenset({f"{host}:{port}"}) if is_trusted else frozenset()
        try:
            target = await check(f"http://{literal}:{port}/", allow=allow)
        except EgressRefused as refused:
            raise EgressDenied(str(refused).removeprefix("url: ")) from None
        return target.address

    return policy
