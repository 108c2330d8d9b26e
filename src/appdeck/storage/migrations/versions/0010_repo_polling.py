"""Polling a connected repository (connect_repo ``poll_seconds``).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("repo_connections") as batch:
        batch.add_column(sa.Column("poll_seconds", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("polled_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("repo_connections") as batch:
        batch.drop_column("polled_at")
        batch.drop_column("poll_seconds")
