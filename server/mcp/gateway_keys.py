"""Filesystem-gateway keys: a key is bound to one user, shown once, stored as its digest;
making a new one for a user replaces (and so revokes) the last."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime

from sqlalchemy import delete, select

from server.store.database import Database
from server.store.models import GatewayKeyRow

__all__ = ["KEY_PREFIX", "GatewayKeys"]

KEY_PREFIX = "iagw_"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class GatewayKeys:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def mint(self, user_id: str) -> str:
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        async with self._db.session() as session, session.begin():
            await session.execute(delete(GatewayKeyRow).where(GatewayKeyRow.user_id == user_id))
            session.add(
                GatewayKeyRow(
                    user_id=user_id, key_digest=_digest(key), created_at=datetime.now(UTC)
                )
            )
        return key

    async def user_of(self, key: str) -> str | None:
        """The user a key belongs to; None for an unknown or replaced key. The lookup is by
        digest, so timing says nothing about how much of a key matched."""
        if not key.startswith(KEY_PREFIX) or len(key) > 256:
            return None
        async with self._db.session() as session:
            return await session.scalar(
                select(GatewayKeyRow.user_id).where(GatewayKeyRow.key_digest == _digest(key))
            )
