"""Credentials: metadata in the clear, secret data sealed with AES-256-GCM.

The key comes from `INSTANCE_AI_CREDENTIALS_KEY` (base64 of 32 bytes) or, unset, from a key
file created beside the database with mode 0600. Each sealed value names the key that sealed
it (a short fingerprint), so after a key change the previous keys listed in
`INSTANCE_AI_CREDENTIALS_PREVIOUS_KEYS` still open old values, and `rekey` seals everything
again with the current key. The credential id is the associated data: a sealed value copied
onto another row does not open.

Nothing here returns secret data except `reveal`, for the service's own use (a credential
test, a run); tools, events and logs get `CredentialInfo` only.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy.ext.asyncio import AsyncConnection

from server.domain import activity
from server.errors import InvalidArgumentError, NotFoundError, UnavailableError
from server.instance.types import CredentialInfo
from server.store import Database
from server.store.models import CredentialRow

__all__ = [
    "CREDENTIALS",
    "FORMAT",
    "KEY_FILE_NAME",
    "TYPE_NAME",
    "CredentialStore",
    "Sealer",
    "decode_key",
    "fingerprint",
    "key_from_file",
]

CREDENTIALS = CredentialRow.metadata.tables["credentials"]
KEY_FILE_NAME = "credentials.key"
FORMAT = "v1"
TYPE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


def decode_key(text: str, origin: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ValueError(
            f"{origin} must be base64 of 32 random bytes, e.g. the output of "
            "`python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())'`"
        )
    return key


def key_from_file(path: Path) -> bytes:
    """The key in `path`, created (0600) on first use. Written aside and linked into place,
    so processes starting together on one data directory all read the one key that won."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(base64.b64encode(os.urandom(32)).decode() + "\n")
        with contextlib.suppress(FileExistsError):  # another process's key is there first
            os.link(aside, path)
        aside.unlink()
    return decode_key(path.read_text(), f"key file {path}")


def fingerprint(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


class Sealer:
    def __init__(self, key: bytes, previous: list[bytes] | None = None) -> None:
        self.current = fingerprint(key)
        self._keys = {fingerprint(k): AESGCM(k) for k in [*(previous or []), key]}

    def seal(self, data: bytes, associated: bytes) -> str:
        nonce = os.urandom(12)
        box = self._keys[self.current].encrypt(nonce, data, associated)
        return f"{FORMAT}:{self.current}:{base64.b64encode(nonce + box).decode()}"

    def open(self, sealed: str, associated: bytes) -> bytes:
        try:
            version, key_id, payload = sealed.split(":", 2)
        except ValueError:
            raise UnavailableError("a stored credential is not in a known format") from None
        key = self._keys.get(key_id)
        if version != FORMAT or key is None:
            raise UnavailableError(
                f"a stored credential was sealed with key {key_id}, which is not configured: "
                "add it to INSTANCE_AI_CREDENTIALS_PREVIOUS_KEYS"
            )
        raw = base64.b64decode(payload)
        try:
            return key.decrypt(raw[:12], raw[12:], associated)
        except InvalidTag:
            raise UnavailableError("a stored credential failed its integrity check") from None


class CredentialStore:
    def __init__(self, db: Database, sealer: Sealer) -> None:
        self.db = db
        self.sealer = sealer

    async def create(
        self, *, project_id: str, name: str, type_name: str, data: dict[str, Any]
    ) -> CredentialInfo:
        _check(name, type_name, data)
        credential_id = uuid.uuid4().hex[:16]
        now = datetime.now(UTC)
        async with self.db.engine.begin() as conn:
            await conn.execute(
                CREDENTIALS.insert().values(
                    id=credential_id,
                    project_id=project_id,
                    name=name,
                    type=type_name,
                    sealed=self._seal(credential_id, data),
                    created_at=now,
                    updated_at=now,
                )
            )
            await _record(conn, "created", credential_id, project_id, name, type_name)
        return await self.get(credential_id)

    async def update(
        self, credential_id: str, *, data: dict[str, Any], name: str | None = None
    ) -> CredentialInfo:
        current = await self.get(credential_id)
        _check(name or current.name, current.type, data)
        async with self.db.engine.begin() as conn:
            await conn.execute(
                CREDENTIALS.update()
                .where(CREDENTIALS.c.id == credential_id)
                .values(
                    name=name or current.name,
                    sealed=self._seal(credential_id, data),
                    updated_at=datetime.now(UTC),
                )
            )
            await _record(
                conn,
                "updated",
                credential_id,
                current.project_id,
                name or current.name,
                current.type,
            )
        return await self.get(credential_id)

    async def all(
        self, project_ids: list[str], type_name: str | None = None
    ) -> list[CredentialInfo]:
        query = (
            sa.select(*_META)
            .where(CREDENTIALS.c.project_id.in_(project_ids))
            .order_by(CREDENTIALS.c.name, CREDENTIALS.c.id)
        )
        if type_name:
            query = query.where(CREDENTIALS.c.type == type_name)
        async with self.db.engine.connect() as conn:
            return [_info(row) for row in await conn.execute(query)]

    async def get(self, credential_id: str) -> CredentialInfo:
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(sa.select(*_META).where(CREDENTIALS.c.id == credential_id))
            ).first()
        if row is None:
            raise NotFoundError(
                f"there is no credential {credential_id!r}; list-credentials names them"
            )
        return _info(row)

    async def delete(self, credential_id: str) -> None:
        current = await self.get(credential_id)
        async with self.db.engine.begin() as conn:
            await conn.execute(CREDENTIALS.delete().where(CREDENTIALS.c.id == credential_id))
            await _record(
                conn, "deleted", credential_id, current.project_id, current.name, current.type
            )

    async def reveal(self, credential_id: str) -> dict[str, Any]:
        """The secret data, for the service's own use only (never a result or an event)."""
        async with self.db.engine.connect() as conn:
            sealed = await conn.scalar(
                sa.select(CREDENTIALS.c.sealed).where(CREDENTIALS.c.id == credential_id)
            )
        if sealed is None:
            raise NotFoundError(f"there is no credential {credential_id!r}")
        value: dict[str, Any] = json.loads(self.sealer.open(sealed, credential_id.encode()))
        return value

    async def rekey(self) -> int:
        """Seal every credential again with the current key; returns how many changed."""
        changed = 0
        async with self.db.engine.begin() as conn:
            rows = await conn.execute(sa.select(CREDENTIALS.c.id, CREDENTIALS.c.sealed))
            for credential_id, sealed in rows.all():
                if sealed.split(":", 2)[1] == self.sealer.current:
                    continue
                data = self.sealer.open(sealed, credential_id.encode())
                await conn.execute(
                    CREDENTIALS.update()
                    .where(CREDENTIALS.c.id == credential_id)
                    .values(sealed=self.sealer.seal(data, credential_id.encode()))
                )
                changed += 1
        return changed

    def _seal(self, credential_id: str, data: dict[str, Any]) -> str:
        return self.sealer.seal(json.dumps(data).encode(), credential_id.encode())


_META = (
    CREDENTIALS.c.id,
    CREDENTIALS.c.name,
    CREDENTIALS.c.type,
    CREDENTIALS.c.project_id,
    CREDENTIALS.c.created_at,
    CREDENTIALS.c.updated_at,
)


def _info(row: Any) -> CredentialInfo:
    return CredentialInfo(
        id=row.id,
        name=row.name,
        type=row.type,
        project_id=row.project_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _check(name: str, type_name: str, data: dict[str, Any]) -> None:
    if not 1 <= len(name.strip()) <= 128:
        raise InvalidArgumentError("name: give the credential a name (1-128 characters)")
    if not TYPE_NAME.fullmatch(type_name):
        raise InvalidArgumentError(
            f"type: {type_name[:40]!r} is not a credential type name; search-credential-types "
            "lists them"
        )
    if not data:
        raise InvalidArgumentError("data: give the credential's fields")


async def _record(
    conn: AsyncConnection,
    action: str,
    credential_id: str,
    project_id: str,
    name: str,
    type_name: str,
) -> None:
    """A credential's entry in the activity log (its type, never its data)."""
    await activity.record(
        conn,
        category="credential",
        action=action,
        project_id=project_id,
        resource_type="credential",
        resource_id=credential_id,
        resource_name=name,
        data={"credentialType": type_name},
    )
