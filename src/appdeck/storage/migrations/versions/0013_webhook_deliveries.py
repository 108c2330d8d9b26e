"""Webhook deliveries already taken (issue 19): a signed delivery replayed, with its
``X-GitHub-Delivery`` or its body under another, is answered without acting again. Rows
expire after the replay window (``APPDECK_WEBHOOK_REPLAY_WINDOW_S``).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("app_id", sa.BigInteger(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("delivery", sa.String(length=100), nullable=True),
        sa.Column("received_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["app_id"],
            ["apps.id"],
            name=op.f("fk_webhook_deliveries_app_id_apps"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("app_id", "digest", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index(
        op.f("ix_webhook_deliveries_received_at"),
        "webhook_deliveries",
        ["received_at"],
        unique=False,
    )
    op.create_index(
        "uq_webhook_deliveries_app_id_delivery",
        "webhook_deliveries",
        ["app_id", "delivery"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_webhook_deliveries_app_id_delivery", table_name="webhook_deliveries")
    op.drop_index(op.f("ix_webhook_deliveries_received_at"), table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
