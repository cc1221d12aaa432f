"""The sandbox service API: its keys (tenants) and its sandboxes.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandbox_api_keys",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("key_digest", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "service_sandboxes",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant", sa.String(80), nullable=False, index=True),
        sa.Column("ephemeral", sa.Boolean, nullable=False),
        sa.Column("egress", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_active_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("service_sandboxes")
    op.drop_table("sandbox_api_keys")
