"""work items of the workflow loop

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "work_items",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "thread_id",
            sa.String(128),
            sa.ForeignKey("threads.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("workflow_id", sa.String(64), nullable=True),
        sa.Column("source_file_path", sa.String(1024), nullable=True),
        sa.Column("state", sa.JSON, nullable=False),
        sa.Column("outcome", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_work_items_thread_id", "work_items", ["thread_id"])
    op.create_index("ix_work_items_workflow_id", "work_items", ["workflow_id"])


def downgrade() -> None:
    op.drop_table("work_items")
