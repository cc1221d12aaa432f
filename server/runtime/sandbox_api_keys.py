"""Keys of the sandbox service API. Each key is a tenant: it sees only the sandboxes it made.

Two sources, as n8n's service has: static keys from the settings (`INSTANCE_AI_SANDBOX_API_KEYS`,
each its own tenant, named by its digest), and named keys made with `instance-ai sandbox-api
key create NAME`, shown once and kept as their SHA-256 digest. A key is looked up by its
digest, so timing says nothing about how much of a key matched.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from server.errors import FailedPreconditionError, InvalidArgumentError
from server.store.database import Database
from server.store.models import SandboxApiKeyRow

__all__ = ["KEY_PREFIX", "KeyInfo", "SandboxApiKeys"]

KEY_PREFIX = "iasb_"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_KEY_CHARS = 512


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class KeyInfo:
    name: str
    created_at: datetime


class SandboxApiKeys:
    def __init__(self, db: Database, static_keys: list[str] | None = None) -> None:
        self._db = db
        # digest → tenant; a static key's tenant is named by its digest, never the key.
        self._static = {_digest(k): f"static:{_digest(k)[:12]}" for k in static_keys or []}

    async def create(self, name: str) -> str:
        """A new key for the tenant `name`, returned once."""
        if not NAME.fullmatch(name):
            raise InvalidArgumentError(
                "a key's name is 1-64 letters, digits, '.', '_' or '-', starting with a letter "
                "or digit"
            )
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        try:
            async with self._db.session() as session, session.begin():
                session.add(
                    SandboxApiKeyRow(
                        name=name, key_digest=_digest(key), created_at=datetime.now(UTC)
                    )
                )
        except IntegrityError:
            raise FailedPreconditionError(
                f"a key named {name!r} exists; revoke it first or choose another name"
            ) from None
        return key

    async def list(self) -> list[KeyInfo]:
        async with self._db.session() as session:
            rows = await session.scalars(select(SandboxApiKeyRow).order_by(SandboxApiKeyRow.name))
            return [KeyInfo(name=r.name, created_at=r.created_at) for r in rows]

    async def revoke(self, name: str) -> bool:
        """Revoke the key `name` (its sandboxes stay, unreachable until a key of that name is
        made again); False when there was none."""
        async with self._db.session() as session, session.begin():
            result = await session.execute(
                delete(SandboxApiKeyRow).where(SandboxApiKeyRow.name == name)
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def tenant_of(self, key: str) -> str | None:
        """The tenant a presented key stands for; None for an unknown or revoked key."""
        if not key or len(key) > MAX_KEY_CHARS:
            return None
        digest = _digest(key)
        static = self._static.get(digest)
        if static is not None:
            return static
        async with self._db.session() as session:
            return await session.scalar(
                select(SandboxApiKeyRow.name).where(SandboxApiKeyRow.key_digest == digest)
            )
