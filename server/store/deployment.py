"""The deployment's id, made by the migration that created its table."""

from __future__ import annotations

from sqlalchemy import select

from server.store.database import Database
from server.store.models import DeploymentRow

__all__ = ["deployment_id"]


async def deployment_id(db: Database) -> str:
    async with db.session() as session:
        found = await session.scalar(select(DeploymentRow.id).limit(1))
    if found is None:  # only if someone deleted the row: the migration always writes it
        raise RuntimeError("the database has no deployment row; restore it from a backup")
    return found
