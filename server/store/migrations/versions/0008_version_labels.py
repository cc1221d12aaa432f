"""workflow versions: a name and a description a person can give them

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflow_versions") as versions:
        versions.add_column(sa.Column("label", sa.Text, nullable=True))
        versions.add_column(sa.Column("description", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workflow_versions") as versions:
        versions.drop_column("description")
        versions.drop_column("label")
