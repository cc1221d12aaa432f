"""the agent: resumable run state, conversation history, confirmations, permissions, plans

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _thread_fk(primary_key: bool = False) -> sa.Column[str]:
    return sa.Column(
        "thread_id",
        sa.String(128),
        sa.ForeignKey("threads.id", ondelete="CASCADE"),
        nullable=False,
        primary_key=primary_key,
    )


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="chat"))
        runs.add_column(sa.Column("message_group_id", sa.String(64), nullable=True))
        runs.add_column(sa.Column("state", sa.JSON, nullable=True))
    op.create_table(
        "thread_messages",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        _thread_fk(),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_thread_messages_thread", "thread_messages", ["thread_id", "seq"])
    op.create_table(
        "confirmations",
        sa.Column("request_id", sa.String(64), primary_key=True),
        _thread_fk(),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("tool_call_id", sa.String(128), nullable=False),
        sa.Column("tool_name", sa.String(64), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("answer", sa.JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_confirmations_thread_id", "confirmations", ["thread_id"])
    op.create_index("ix_confirmations_run_id", "confirmations", ["run_id"])
    op.create_table(
        "thread_permissions",
        _thread_fk(primary_key=True),
        sa.Column("action", sa.String(64), primary_key=True),
        sa.Column("mode", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "plans",
        _thread_fk(primary_key=True),
        sa.Column("plan_run_id", sa.String(64), nullable=True),
        sa.Column("message_group_id", sa.String(64), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("tasks", sa.JSON, nullable=False),
        sa.Column("checklist", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    for table in ("plans", "thread_permissions", "confirmations", "thread_messages"):
        op.drop_table(table)
    with op.batch_alter_table("runs") as runs:
        for column in ("state", "message_group_id", "kind"):
            runs.drop_column(column)
