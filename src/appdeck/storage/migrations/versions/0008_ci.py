"""CI (issue 11): an app's CI configuration and its runs (manage_ci).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ci_configs",
        sa.Column("app_id", sa.BigInteger(), nullable=False),
        sa.Column("branch", sa.String(), nullable=True),
        sa.Column("test_command", sa.Text(), nullable=False),
        sa.Column("auto_deploy", sa.Boolean(), nullable=False),
        sa.Column("strategy", sa.String(), nullable=True),
        sa.Column("require_green", sa.Boolean(), nullable=False),
        sa.Column("timeout_seconds", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["app_id"], ["apps.id"], name=op.f("fk_ci_configs_app_id_apps"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("app_id", name=op.f("pk_ci_configs")),
    )
    op.create_table(
        "ci_runs",
        sa.Column("app_id", sa.BigInteger(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("commit", sa.String(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("branch", sa.String(), nullable=False),
        sa.Column("trigger", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("log", sa.Text(), nullable=False),
        sa.Column("deployment", sa.Integer(), nullable=True),
        sa.Column("task_id", sa.String(), nullable=True),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("instance_id", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(
            ["app_id"], ["apps.id"], name=op.f("fk_ci_runs_app_id_apps"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("app_id", "number", name=op.f("pk_ci_runs")),
    )
    op.create_index(op.f("ix_ci_runs_state"), "ci_runs", ["state"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_ci_runs_state"), table_name="ci_runs")
    op.drop_table("ci_runs")
    op.drop_table("ci_configs")
