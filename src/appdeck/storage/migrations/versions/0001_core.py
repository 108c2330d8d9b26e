"""Core tables: sessions, tasks and the per-session event log.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("tenant", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("protocol_version", sa.String(), nullable=False),
        sa.Column("client_info", sa.JSON(), nullable=False),
        sa.Column("client_capabilities", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_active", sa.Double(), nullable=False),
        sa.Column("log_level", sa.String(), nullable=False),
        sa.Column("initialized", sa.Boolean(), nullable=False),
        sa.Column("subscriptions", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_index(op.f("ix_sessions_last_active"), "sessions", ["last_active"])

    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("tenant", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("ttl_ms", sa.BigInteger(), nullable=True),
        sa.Column("poll_interval_ms", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("progress_token", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_tasks")),
    )
    op.create_index(op.f("ix_tasks_status"), "tasks", ["status"])
    op.create_index(
        op.f("ix_tasks_tenant_user_created_at"), "tasks", ["tenant", "user", "created_at"]
    )

    op.create_table(
        "session_events",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("stream", sa.String(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_session_events")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_session_events_created_at"), "session_events", ["created_at"])
    op.create_index(
        op.f("ix_session_events_session_id_stream_seq"),
        "session_events",
        ["session_id", "stream", "seq"],
    )


def downgrade() -> None:
    op.drop_table("session_events")
    op.drop_table("tasks")
    op.drop_table("sessions")
