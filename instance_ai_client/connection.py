"""Connecting to a running server: the target, TLS, and the API key as call metadata."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["DEFAULT_SERVER", "ClientConfig"]

DEFAULT_SERVER = "127.0.0.1:50051"


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    server: str = DEFAULT_SERVER
    api_key: str | None = None
    tls_ca_file: Path | None = None

    def channel(self) -> grpc.aio.Channel:
        if self.tls_ca_file is not None:
            credentials = grpc.ssl_channel_credentials(self.tls_ca_file.read_bytes())
            return grpc.aio.secure_channel(self.server, credentials)
        return grpc.aio.insecure_channel(self.server)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.api_key}"),) if self.api_key else ()
