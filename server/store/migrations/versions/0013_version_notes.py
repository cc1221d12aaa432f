"""version_notes: the service's own record of versions another instance (n8n) keeps

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "version_notes",
        sa.Column("version_id", sa.String(64), primary_key=True),
        sa.Column("workflow_id", sa.String(64), nullable=False, index=True),
        sa.Column("fixtures", sa.JSON, nullable=True),
        sa.Column("simulation_plan", sa.JSON, nullable=True),
        sa.Column("label", sa.Text, nullable=True),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("is_supporting", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("version_notes")
