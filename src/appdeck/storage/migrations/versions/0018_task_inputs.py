"""A stateless task's input requests and the client's answers (issue 22, the tasks extension of
MCP 2026-07-28): the worker records what it asks, ``tasks/update`` on any replica stores the
answers, the worker reads them back. One row per request; the key is never reused.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "task_inputs",
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("response", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("asked_at", sa.Double(), nullable=False),
        sa.Column("answered_at", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.task_id"],
            name=op.f("fk_task_inputs_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", "key", name=op.f("pk_task_inputs")),
    )


def downgrade() -> None:
    op.drop_table("task_inputs")
