"""Fairness (issue 9, part 2): sessions remember the token that made them (per-token caps)
and are indexed per (tenant, user, last_active) (per-user caps); OAuth clients remember their
first authorization, so dynamically registered clients never used expire.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("token_id", sa.String(), nullable=True))
        batch.create_index(op.f("ix_sessions_token_id"), ["token_id"])
        batch.create_index(
            op.f("ix_sessions_tenant_user_last_active"), ["tenant", "user", "last_active"]
        )
    with op.batch_alter_table("oauth_clients") as batch:
        batch.add_column(sa.Column("used_at", sa.Double(), nullable=True))
    # clients registered before this migration may be in use: they are not swept
    op.execute("UPDATE oauth_clients SET used_at = created_at")


def downgrade() -> None:
    with op.batch_alter_table("oauth_clients") as batch:
        batch.drop_column("used_at")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index(op.f("ix_sessions_tenant_user_last_active"))
        batch.drop_index(op.f("ix_sessions_token_id"))
        batch.drop_column("token_id")
