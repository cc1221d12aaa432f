"""tags on workflows, and folders of workflows within projects

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tags",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "workflow_tags",
        sa.Column(
            "workflow_id",
            sa.String(64),
            sa.ForeignKey("workflows.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "tag_id", sa.String(32), sa.ForeignKey("tags.id", ondelete="CASCADE"), primary_key=True
        ),
    )
    op.create_table(
        "folders",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("project_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("parent_folder_id", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_folders_project_id", "folders", ["project_id"])
    with op.batch_alter_table("workflows") as workflows:
        workflows.add_column(sa.Column("folder_id", sa.String(32), nullable=True))
        workflows.create_index("ix_workflows_folder_id", ["folder_id"])


def downgrade() -> None:
    with op.batch_alter_table("workflows") as workflows:
        workflows.drop_index("ix_workflows_folder_id")
        workflows.drop_column("folder_id")
    for table in ("folders", "workflow_tags", "tags"):
        op.drop_table(table)
