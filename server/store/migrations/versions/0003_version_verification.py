"""what verification needs of a build: declared fixtures and the simulation plan

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflow_versions") as batch:
        batch.add_column(sa.Column("fixtures", sa.JSON, nullable=True))
        batch.add_column(sa.Column("simulation_plan", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workflow_versions") as batch:
        batch.drop_column("simulation_plan")
        batch.drop_column("fixtures")
