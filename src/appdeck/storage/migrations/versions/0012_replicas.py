"""Replicas behind one URL (issue 13): liveness, per-app deploy locks with a fence, pending
consent shared by every replica, signing keys in the database, and at most one deployment in
progress per app (enforced by the database, not by a check-then-insert).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

IN_PROGRESS = "state IN ('queued', 'building', 'starting', 'canary')"


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("heartbeat_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id", name=op.f("pk_replicas")),
    )
    op.create_table(
        "app_locks",
        sa.Column("app_id", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("app_id", name=op.f("pk_app_locks")),
    )
    op.create_table(
        "consent_requests",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_consent_requests")),
    )
    op.create_index(
        op.f("ix_consent_requests_expires_at"), "consent_requests", ["expires_at"], unique=False
    )
    op.create_table(
        "signing_keys",
        sa.Column("kid", sa.String(), nullable=False),
        sa.Column("sealed_jwk", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_signing_keys")),
    )
    op.create_index(
        "uq_deployments_in_progress",
        "deployments",
        ["app_id"],
        unique=True,
        postgresql_where=sa.text(IN_PROGRESS),
        sqlite_where=sa.text(IN_PROGRESS),
    )


def downgrade() -> None:
    op.drop_index("uq_deployments_in_progress", table_name="deployments")
    op.drop_table("signing_keys")
    op.drop_index(op.f("ix_consent_requests_expires_at"), table_name="consent_requests")
    op.drop_table("consent_requests")
    op.drop_table("app_locks")
    op.drop_table("replicas")
