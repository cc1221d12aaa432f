"""user data tables: their metadata (each one's rows live in a table of its own)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "data_tables",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("project_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ux_data_tables_project_name", "data_tables", ["project_id", "name"], unique=True
    )
    op.create_table(
        "data_table_columns",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "table_id",
            sa.String(32),
            sa.ForeignKey("data_tables.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
    )
    op.create_index("ix_data_table_columns_table_id", "data_table_columns", ["table_id"])
    op.create_index(
        "ux_data_table_columns_table_name",
        "data_table_columns",
        ["table_id", "name"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_table("data_table_columns")
    op.drop_table("data_tables")
