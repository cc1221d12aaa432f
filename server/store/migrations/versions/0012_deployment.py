"""deployment: the id of this deployment's database (its default sandbox owner)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "deployment",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    # Made once, with the table: every process on this database reads the same id.
    op.bulk_insert(table, [{"id": str(uuid.uuid4()), "created_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("deployment")
