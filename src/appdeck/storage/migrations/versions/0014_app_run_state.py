"""Operating an app (issue 20, item 10): whether it is stopped (kept at 0 instances, its
routes answering 503 "stopped"), and a stop or start the operator's CLI asked for that the
server has not applied yet.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("apps") as batch:
        batch.add_column(
            sa.Column("stopped", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("run_intent", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("apps") as batch:
        batch.drop_column("run_intent")
        batch.drop_column("stopped")
