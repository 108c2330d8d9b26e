"""Limits on everything a client controls in an app's tables (docs/tables.md, "Limits")."""

from __future__ import annotations

from typing import Final

from appdeck.common.errors import QuotaExceeded

TABLES_PER_APP: Final = 200
COLUMNS_PER_TABLE: Final = 100
"""Declared columns, ``id`` included."""
INDEXES_PER_TABLE: Final = 20
"""Indexes the app declares (unique columns and full text are not counted)."""
COLUMNS_PER_INDEX: Final = 16
FULLTEXT_COLUMNS: Final = 32
ROWS_PER_INSERT: Final = 1000
VALUE_BYTES: Final = 1024 * 1024
"""One value (text, JSON as text) at most 1 MiB."""
PAYLOAD_BYTES: Final = 8 * 1024 * 1024
"""All the values of one call at most 8 MiB."""
LIST_DEFAULT: Final = 50
LIST_MAX: Final = 500
QUERY_TIMEOUT_S: Final = 5.0
ALTER_STEPS: Final = 50
"""Changes in one alter_table call."""


def at_most(count: int, limit: int, what: str, *, field: str) -> None:
    """Raise :class:`QuotaExceeded` naming ``field`` when ``count`` is over ``limit``."""
    if count > limit:
        raise QuotaExceeded(
            f"{what}: {count} is more than the limit of {limit}", field=field, limit=limit
        )
