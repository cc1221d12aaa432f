"""Per-resource "always allow" grants: thread_permissions.action holds grant keys such as
`runWorkflow:workflow:<id>` or `executeNode:node:<type>:<resource>:<operation>`, longer than
the 64 characters an action name needed.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("thread_permissions") as table:
        table.alter_column("action", type_=sa.String(512), existing_type=sa.String(64))


def downgrade() -> None:
    with op.batch_alter_table("thread_permissions") as table:
        table.alter_column("action", type_=sa.String(64), existing_type=sa.String(512))
