"""A plan keeps its planning context (summary, assumptions, whether the person asked for a
run after the build): the planned tasks' runs are told it, and acted on it.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as plans:
        plans.add_column(sa.Column("context", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans") as plans:
        plans.drop_column("context")
