"""Automatic TLS (issue 21 §3): the ACME account per CA directory, the certificates the
platform obtains (chain and key sealed, validity, state, last error, attempts, next try, the
replica ordering it), the orders sent (the per-tenant hourly limit) and the HTTP-01 challenges
pending, with which replicas serve them.

Chained after 0014 on its branch; the lead puts it after the domains' 0015 at merge.

Revision ID: 0016
Revises: 0014
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "tls_accounts",
        sa.Column("directory", sa.String(2048), nullable=False),
        sa.Column("key_sealed", sa.Text(), nullable=False),
        sa.Column("uri", sa.String(2048), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("directory", name=op.f("pk_tls_accounts")),
    )
    op.create_table(
        "tls_certificates",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("hostnames", sa.JSON(), nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("tenant_id", sa.String(), nullable=True),
        sa.Column("app_id", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("chain_sealed", sa.Text(), nullable=True),
        sa.Column("key_sealed", sa.Text(), nullable=True),
        sa.Column("issuer", sa.String(256), nullable=True),
        sa.Column("not_before", sa.Double(), nullable=True),
        sa.Column("not_after", sa.Double(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_try", sa.Double(), nullable=False),
        sa.Column("holder", sa.String(200), nullable=True),
        sa.Column("held_until", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tls_certificates")),
    )
    op.create_index(
        op.f("ix_tls_certificates_next_try"), "tls_certificates", ["next_try"], unique=False
    )
    op.create_table(
        "tls_orders",
        sa.Column("id", Seq, autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(), nullable=True),
        sa.Column("at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tls_orders")),
        sqlite_autoincrement=False,
    )
    op.create_index(op.f("ix_tls_orders_tenant_id"), "tls_orders", ["tenant_id"], unique=False)
    op.create_index(op.f("ix_tls_orders_at"), "tls_orders", ["at"], unique=False)
    op.create_table(
        "tls_challenges",
        sa.Column("token", sa.String(128), nullable=False),
        sa.Column("key_authorization", sa.String(260), nullable=False),
        sa.Column("certificate", sa.String(128), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("token", name=op.f("pk_tls_challenges")),
    )
    op.create_index(
        op.f("ix_tls_challenges_expires_at"), "tls_challenges", ["expires_at"], unique=False
    )
    op.create_table(
        "tls_challenge_acks",
        sa.Column("token", sa.String(128), nullable=False),
        sa.Column("replica", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("token", "replica", name=op.f("pk_tls_challenge_acks")),
    )


def downgrade() -> None:
    op.drop_table("tls_challenge_acks")
    op.drop_index(op.f("ix_tls_challenges_expires_at"), table_name="tls_challenges")
    op.drop_table("tls_challenges")
    op.drop_index(op.f("ix_tls_orders_at"), table_name="tls_orders")
    op.drop_index(op.f("ix_tls_orders_tenant_id"), table_name="tls_orders")
    op.drop_table("tls_orders")
    op.drop_index(op.f("ix_tls_certificates_next_try"), table_name="tls_certificates")
    op.drop_table("tls_certificates")
    op.drop_table("tls_accounts")
