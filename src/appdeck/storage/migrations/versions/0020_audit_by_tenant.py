"""The audit log by tenant: the console's audit page reads one tenant's rows newest first
(keyset on id); without this index a rare filter on a large log read the whole table.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_audit_log_tenant_id_id", "audit_log", ["tenant_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_audit_log_tenant_id_id", table_name="audit_log")
