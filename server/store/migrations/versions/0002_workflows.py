"""workflows, their versions, and source-file bindings

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("project_id", sa.String(64), nullable=True),
        sa.Column("is_archived", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("is_supporting", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("current_version_id", sa.String(64), nullable=False),
        sa.Column("active_version_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_workflows_updated", "workflows", ["updated_at"])
    op.create_table(
        "workflow_versions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "workflow_id",
            sa.String(64),
            sa.ForeignKey("workflows.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("nodes", sa.JSON, nullable=False),
        sa.Column("connections", sa.JSON, nullable=False),
        sa.Column("settings", sa.JSON, nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_workflow_versions_workflow_id", "workflow_versions", ["workflow_id"])
    op.create_index(
        "ux_workflow_versions_number", "workflow_versions", ["workflow_id", "number"], unique=True
    )
    op.create_table(
        "source_bindings",
        sa.Column(
            "thread_id",
            sa.String(128),
            sa.ForeignKey("threads.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("file_path", sa.String(1024), primary_key=True),
        sa.Column("workflow_id", sa.String(64), nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_source_bindings_workflow_id", "source_bindings", ["workflow_id"])


def downgrade() -> None:
    op.drop_table("source_bindings")
    op.drop_table("workflow_versions")
    op.drop_table("workflows")
