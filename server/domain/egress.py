"""Outbound requests the service makes for its users, refused before any connection when they
would reach inside: the SSRF rules.

* http and https only, no credentials in the URL;
* the host is resolved, and every address it resolves to must be public: not private,
  loopback, link-local, CGNAT (100.64/10), benchmarking (198.18/15), reserved, multicast,
  unspecified, an IPv6 local or unique-local address, or an IPv4-mapped form of any of those
  (decimal and hex IP spellings resolve to the same addresses, so they are caught the same);
* the connection is then made to the checked address itself (pinned), with the host name
  kept for the Host header and TLS, so a second DNS answer cannot swap in an inside address.

`allow` names exact `host:port` pairs exempt from the address rules (off by default; tests
use it to reach local servers on purpose).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from server.errors import InvalidArgumentError

__all__ = [
    "EgressRefused",
    "IPAddress",
    "Target",
    "check",
    "is_public",
    "pinned_request",
    "split_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_BLOCKED_V4 = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "240.0.0.0/4",
    )
]


class EgressRefused(InvalidArgumentError):
    """The request would reach an address the service does not send users' traffic to."""


@dataclass(frozen=True, kw_only=True)
class Target:
    """A checked URL: where to connect (`address`) and what to call it (`host`)."""

    url: str
    scheme: str
    host: str
    port: int
    address: str

    @property
    def pinned_url(self) -> str:
        """The URL with the host replaced by the checked address."""
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if ":" in self.address else self.address
        netloc = f"{literal}:{self.port}"
        path = parts.path or "/"
        return f"{self.scheme}://{netloc}{path}" + (f"?{parts.query}" if parts.query else "")

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return is_public(mapped)
        return not (
            address.is_loopback
            or address.is_link_local
            or address.is_site_local
            or address.is_private
            or address.is_reserved
            or address.is_multicast
            or address.is_unspecified
        )
    if any(address in network for network in _BLOCKED_V4):
        return False
    return not (
        address.is_private or address.is_reserved or address.is_multicast or address.is_unspecified
    )


def split_url(url: str) -> tuple[str, str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise EgressRefused(f"url {url[:200]!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise EgressRefused(f"url: only http and https are fetched, not {scheme or 'no scheme'}")
    if parts.username or parts.password:
        raise EgressRefused("url: credentials in the URL are not sent; remove user:password@")
    if not parts.hostname:
        raise EgressRefused(f"url {url[:200]!r} has no host")
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


async def check(url: str, *, allow: frozenset[str] = frozenset()) -> Target:
    """Resolve and check `url`; every address must be public (or the pair allowed)."""
    scheme, host, port = split_url(url)
    try:
        infos = await asyncio.to_thread(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise EgressRefused(f"url: the host {host!r} does not resolve ({exc.strerror})") from None
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    exempt = f"{host}:{port}" in allow
    inside = [a for a in addresses if not is_public(a)]
    if inside and not exempt:
        raise EgressRefused(
            f"url: {host} resolves to {inside[0]}, an internal address; only public addresses "
            "are fetched"
        )
    return Target(url=url, scheme=scheme, host=host, port=port, address=str(addresses[0]))


def pinned_request(
    client: httpx.AsyncClient,
    target: Target,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
    json: Any = None,
) -> httpx.Request:
    """A request to the checked address, named by its host (Host header, TLS server name)."""
    return client.build_request(
        method,
        target.pinned_url,
        headers={**(headers or {}), "Host": target.host_header},
        params=params,
        json=json,
        extensions={"sni_hostname": target.host},
    )
