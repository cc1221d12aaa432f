"""Threads belong to a user and a project, carry their metadata and when they last changed;
runs keep the person's message (the conversation history a client shows).

Threads from before this revision have no owner: any caller may reach them, as before.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("threads") as threads:
        threads.add_column(sa.Column("owner", sa.String(128), nullable=True))
        threads.add_column(sa.Column("project_id", sa.String(128), nullable=True))
        threads.add_column(sa.Column("metadata", sa.JSON, nullable=True))
        threads.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_threads_owner_updated", "threads", ["owner", "updated_at", "id"])
    with op.batch_alter_table("runs") as runs:
        runs.add_column(sa.Column("message", sa.Text, nullable=True))
        runs.add_column(sa.Column("message_id", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("message_id")
        runs.drop_column("message")
    op.drop_index("ix_threads_owner_updated", table_name="threads")
    with op.batch_alter_table("threads") as threads:
        threads.drop_column("updated_at")
        threads.drop_column("metadata")
        threads.drop_column("project_id")
        threads.drop_column("owner")
