"""The tables, as SQLAlchemy Core metadata.

This is the shape the stores query; the migrations in ``migrations/versions`` create it and
must be kept in step with it (a test compares the two). Times are epoch seconds as doubles;
JSON columns hold plain JSON values.
"""

from __future__ import annotations

import sqlalchemy as sa

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""BIGINT on PostgreSQL; INTEGER on SQLite, where only INTEGER PRIMARY KEY autoincrements."""

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("tenant", sa.String, nullable=False),
    sa.Column("user", sa.String, nullable=False),
    sa.Column("protocol_version", sa.String, nullable=False),
    sa.Column("client_info", sa.JSON, nullable=False),
    sa.Column("client_capabilities", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("last_active", sa.Double, nullable=False, index=True),
    sa.Column("log_level", sa.String, nullable=False),
    sa.Column("initialized", sa.Boolean, nullable=False),
    sa.Column("subscriptions", sa.JSON, nullable=False),  # sorted list of URIs
)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("task_id", sa.String, primary_key=True),
    sa.Column("tenant", sa.String, nullable=False),
    sa.Column("user", sa.String, nullable=False),
    sa.Column("session_id", sa.String, nullable=False),
    sa.Column("status", sa.String, nullable=False, index=True),
    sa.Column("status_message", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("ttl_ms", sa.BigInteger, nullable=True),
    sa.Column("poll_interval_ms", sa.Integer, nullable=False),
    sa.Column("method", sa.String, nullable=False),
    sa.Column("params", sa.JSON, nullable=False),
    sa.Column("instance_id", sa.String, nullable=False),
    # none_as_null: Python None is SQL NULL, not the JSON text 'null'
    sa.Column("result", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("error", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("progress_token", sa.JSON(none_as_null=True), nullable=True),
    sa.Index(None, "tenant", "user", "created_at"),
)

session_events = sa.Table(
    "session_events",
    metadata,
    sa.Column("seq", Seq, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String, nullable=False),
    sa.Column("stream", sa.String, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),  # the JSON-RPC message, UTF-8 text
    sa.Column("created_at", sa.Double, nullable=False, index=True),
    sa.Index(None, "session_id", "stream", "seq"),
    # AUTOINCREMENT: SQLite never reuses a seq, even after the newest rows are deleted
    sqlite_autoincrement=True,
)
