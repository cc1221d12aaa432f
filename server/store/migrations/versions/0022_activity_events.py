"""The embedded instance's activity log: each change to its workflows and credentials.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "activity_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("category", sa.String(32), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=True),
        sa.Column("project_id", sa.String(128), nullable=False),
        sa.Column("resource_type", sa.String(32), nullable=True),
        sa.Column("resource_id", sa.String(64), nullable=True),
        sa.Column("resource_name", sa.Text, nullable=True),
        sa.Column("data", sa.JSON, nullable=True),
    )
    op.create_index("ix_activity_events_project", "activity_events", ["project_id", "id"])
    op.create_index(
        "ix_activity_events_resource", "activity_events", ["resource_type", "resource_id", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_activity_events_resource", table_name="activity_events")
    op.drop_index("ix_activity_events_project", table_name="activity_events")
    op.drop_table("activity_events")
