"""The service sandboxes' egress policy, mode by mode (the proxy itself, and a sandbox going
through it, are tested in tests/test_sandbox_api.py): public addresses only, a host list,
nothing; trusted hosts at any address; a sandbox's own `none`. No address is ever contacted:
the policy only resolves and decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox.egress import EgressDenied
from server.runtime.egress import service_egress_policy, trusted_hosts
from server.settings import load_settings

pytestmark = pytest.mark.attack

KEY = "sandbox-api/00000000-0000-4000-8000-000000000000"


def policy(tmp_path: Path, sandbox_egress: str = "public", **settings: Any) -> Any:
    values = load_settings(data_dir=tmp_path, **settings)

    async def egress_of(_key: str) -> str:
        return sandbox_egress

    return service_egress_policy(values, trusted_hosts(values, None), egress_of)


async def test_public_mode_refuses_private_and_reserved_addresses(tmp_path: Path) -> None:
    allow = policy(tmp_path)
    for host in ("10.1.2.3", "192.168.0.1", "172.16.5.5", "127.0.0.1", "169.254.169.254", "::1"):
        with pytest.raises(EgressDenied, match="internal address"):
            await allow(KEY, host, 443)
    # A name that resolves to loopback is refused like the address.
    with pytest.raises(EgressDenied, match="internal address"):
        await allow(KEY, "localhost", 80)


async def test_a_trusted_host_is_reached_at_any_address(tmp_path: Path) -> None:
    allow = policy(tmp_path, sandbox_api_trusted_hosts=["localhost", "10.9.9.9:4873"])
    assert await allow(KEY, "localhost", 8080) in ("127.0.0.1", "::1")
    assert await allow(KEY, "10.9.9.9", 4873) == "10.9.9.9"
    with pytest.raises(EgressDenied):  # trusted on that port only
        await allow(KEY, "10.9.9.9", 22)


async def test_hosts_mode_allows_only_the_listed_and_trusted_hosts(tmp_path: Path) -> None:
    allow = policy(
        tmp_path,
        sandbox_api_egress="hosts",
        sandbox_api_egress_hosts=["api.example.com"],
        sandbox_api_trusted_hosts=["localhost"],
    )
    with pytest.raises(EgressDenied, match="not one of the hosts"):
        await allow(KEY, "other.example.com", 443)
    assert await allow(KEY, "localhost", 80) in ("127.0.0.1", "::1")


async def test_none_refuses_everything_trusted_hosts_included(tmp_path: Path) -> None:
    closed = policy(tmp_path, sandbox_api_egress="none", sandbox_api_trusted_hosts=["localhost"])
    with pytest.raises(EgressDenied, match="no network"):
        await closed(KEY, "localhost", 80)
    own = policy(tmp_path, sandbox_egress="none", sandbox_api_trusted_hosts=["localhost"])
    with pytest.raises(EgressDenied, match="no network"):
        await own(KEY, "localhost", 80)


def test_the_registry_the_sandboxes_use_is_trusted(tmp_path: Path) -> None:
    values = load_settings(data_dir=tmp_path)
    hosts = trusted_hosts(values, "https://Mirror.Internal:4873/npm/")
    assert hosts == frozenset({"mirror.internal"})
