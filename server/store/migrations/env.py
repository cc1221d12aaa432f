"""Alembic environment: migrations always run on the connection the service hands over."""

from __future__ import annotations

from alembic import context

from server.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("migrations run through server.store.Database.migrate(), not the CLI")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
