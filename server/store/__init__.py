"""Persistence: SQLAlchemy models, the async engine, and Alembic migrations run at start."""

from server.store.database import Database

__all__ = ["Database"]
