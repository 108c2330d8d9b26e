"""Custom domains (issue 21 §2): each hostname an app's spec lists is claimed here, held by
one app platform-wide (the primary key), pending until its owner proves control (a DNS TXT
record or an ACME HTTP-01 order), then verified and served.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "app_domains",
        sa.Column("host", sa.String(length=253), nullable=False),
        sa.Column("app_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("method", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("verified_at", sa.Double(), nullable=True),
        sa.Column("checked_at", sa.Double(), nullable=True),
        sa.Column("last_error", sa.String(length=300), nullable=True),
        sa.ForeignKeyConstraint(
            ["app_id"], ["apps.id"], name=op.f("fk_app_domains_app_id_apps"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_app_domains")),
    )
    op.create_index("ix_app_domains_app_id", "app_domains", ["app_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_app_domains_app_id", table_name="app_domains")
    op.drop_table("app_domains")
