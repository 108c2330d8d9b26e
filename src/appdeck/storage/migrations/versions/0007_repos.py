"""Repos (issue 11, part 1): an app's git repository connection (connect_repo). A deployment's
commit sha and message live in its ``source`` JSON (``{"kind": "git", "commit", "message"}``),
which needs no column.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "repo_connections",
        sa.Column("app_id", sa.BigInteger(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("token", sa.Text(), nullable=True),
        sa.Column("branch", sa.String(), nullable=False),
        sa.Column("webhook_secret", sa.Text(), nullable=False),
        sa.Column("auto_deploy", sa.Boolean(), nullable=False),
        sa.Column("last_commit", sa.String(), nullable=True),
        sa.Column("last_message", sa.Text(), nullable=True),
        sa.Column("last_push_at", sa.Double(), nullable=True),
        sa.Column("connected_by", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["app_id"],
            ["apps.id"],
            name=op.f("fk_repo_connections_app_id_apps"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("app_id", name=op.f("pk_repo_connections")),
    )


def downgrade() -> None:
    op.drop_table("repo_connections")
