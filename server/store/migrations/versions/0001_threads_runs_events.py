"""threads, runs and the durable event log

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "threads",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_event_id", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("title", sa.Text, nullable=True),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "thread_id",
            sa.String(128),
            sa.ForeignKey("threads.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
    )
    op.create_index("ix_runs_thread_id", "runs", ["thread_id"])
    open_run = sa.text("status IN ('active', 'suspended')")
    op.create_index(
        "ux_runs_one_open_per_thread",
        "runs",
        ["thread_id"],
        unique=True,
        sqlite_where=open_run,
        postgresql_where=open_run,
    )
    op.create_table(
        "events",
        sa.Column(
            "thread_id",
            sa.String(128),
            sa.ForeignKey("threads.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("agent_id", sa.String(64), nullable=True),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
    )
    op.create_index("ix_events_run", "events", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_events_run", "events")
    op.drop_table("events")
    op.drop_index("ux_runs_one_open_per_thread", "runs")
    op.drop_index("ix_runs_thread_id", "runs")
    op.drop_table("runs")
    op.drop_table("threads")
