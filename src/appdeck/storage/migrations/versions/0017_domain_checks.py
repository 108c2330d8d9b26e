"""Custom domains re-checked (issue 21 §2): when a verified domain's TXT proof was first found
missing (``failing_since``), so it stops being served only after a grace period.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("app_domains") as batch:
        batch.add_column(sa.Column("failing_since", sa.Double, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("app_domains") as batch:
        batch.drop_column("failing_since")
