"""OAuth clients that belong to an app (manage_oauth_client): ``oauth_clients.app_id``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("oauth_clients") as batch:
        batch.add_column(sa.Column("app_id", sa.BigInteger(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_oauth_clients_app_id_apps"), "apps", ["app_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index(op.f("ix_oauth_clients_app_id"), ["app_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("oauth_clients") as batch:
        batch.drop_index(op.f("ix_oauth_clients_app_id"))
        batch.drop_constraint(op.f("fk_oauth_clients_app_id_apps"), type_="foreignkey")
        batch.drop_column("app_id")
