"""What an instance is given to reach its app's own database (issue 10): ``DATABASE_URL``,
and in a sandbox either a directory bound at ``/data`` (SQLite) or a pinned PostgreSQL front
on ``127.0.0.1:5432`` in its network (:mod:`.pgfront`). The apps' databases themselves are
:mod:`appdeck.platform.tables.databases`; the driver only asks them for a grant."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

DATA_DIR: Final = "/data"
"""Where a sandboxed app finds its SQLite database's directory."""


@dataclass(frozen=True, slots=True)
class PostgresTarget:
    """Where a sandboxed app's PostgreSQL front forwards to, and the only user and database
    its startup message may name."""

    host: str
    port: int
    user: str
    database: str


@dataclass(frozen=True, slots=True)
class DatabaseGrant:
    """What an app's instance gets to reach its own database (and nothing else)."""

    env: dict[str, str] = field(default_factory=dict)
    """``DATABASE_URL``, as the app sees it."""
    bind: Path | None = None
    """SQLite, sandboxed: the host directory bound read-write into the sandbox at ``/data``."""
    postgres: PostgresTarget | None = None
    """PostgreSQL, sandboxed: the front served in the instance's network on 127.0.0.1:5432."""


class DatabaseAccess(Protocol):
    """The apps' databases, as the driver sees them."""

    async def grant(self, app_id: int, *, sandboxed: bool) -> DatabaseGrant: ...
