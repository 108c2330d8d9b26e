"""The app's own code in its database never runs inside the server.

An app can put code in its database through ``DATABASE_URL``: a SQLite trigger runs in the
process of whoever writes to the table, so a trigger with a runaway body (``randomblob`` of a
gigabyte, again and again) would run in the server when a table tool writes a row (issue 19,
finding 6). Before the platform writes to (or drops, or rebuilds) a SQLite table,
:func:`refuse_app_triggers` looks at every trigger that the write could fire: those on the
table, and those on every table a foreign-key action could reach from it (``ON DELETE
CASCADE`` deletes rows there, and fires their triggers). Each must be one of ours, to the
byte (the three full-text triggers ``<table>__fts_a[idu]`` as :func:`ddl.fulltext_create`
writes them); any other is refused (``failed_precondition`` naming it) before any statement
runs. Reads fire no trigger, and the platform never reads a view (only tables are listed and
read), so an app's views are ignored.

PostgreSQL needs no such check: the platform's transactions there log in as the app's own
role (``appdb_postgres``), so whatever code the app wrote runs as the app, under the
transaction's ``statement_timeout``, with nothing more than the app's rights.
"""

from __future__ import annotations

from typing import Final, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from appdeck.common.errors import FailedPrecondition
from appdeck.platform.tables import ddl, names

Dialect = Literal["sqlite", "postgresql"]

MAX_REACHED: Final = 200
"""Tables a foreign-key action may reach that are looked at (the app's table limit)."""
_SHOWN_TRIGGERS: Final = 5


async def refuse_app_triggers(
    conn: AsyncConnection, dialect: Dialect, table: str, *, itself: bool = True
) -> None:
    """:class:`FailedPrecondition` when writing to ``table`` would fire a trigger the
    platform did not make (see the module docstring). ``itself=False``: the table is being
    dropped (``DROP TABLE`` fires none of its own triggers, only its foreign-key actions').
    PostgreSQL: nothing to do."""
    if dialect != "sqlite":
        return
    every = (
        await conn.execute(
            sa.text("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'")
        )
    ).all()
    if not every:  # the usual case: one query
        return
    on: dict[str, list[tuple[str, str]]] = {}
    for name, tbl, sql in every:
        on.setdefault(str(tbl).lower(), []).append((str(name), str(sql)))
    reached = [table]
    if set(on) - {table.lower()}:  # triggers elsewhere: which tables can a write reach?
        reached = await _reached(conn, table)
    if not itself:
        reached = reached[1:]
    foreign: list[str] = []
    for name in reached:
        found = on.get(name.lower(), [])
        if found:
            ours = await _our_triggers(conn, name)
            foreign.extend(n for n, sql in found if (n, sql) not in ours)
    if foreign:
        listed = ", ".join(names.shown(n) for n in foreign[:_SHOWN_TRIGGERS])
        extra = len(foreign) - _SHOWN_TRIGGERS
        more = f" and {extra} more" if extra > 0 else ""
        raise FailedPrecondition(
            f"table {table}: writing to it would run triggers the app put in its database "
            f"({listed}{more}); the table tools never run an app's code, so nothing was done",
            hint="drop those triggers (the app can, through DATABASE_URL), "
            "or write these rows through the app itself",
            field="table",
            triggers=[names.shown(n)[1:-1] for n in foreign[:_SHOWN_TRIGGERS]],
        )


async def _reached(conn: AsyncConnection, table: str) -> list[str]:
    """``table`` and every table whose foreign keys refer to one of these (transitively)."""
    seen = [table]
    todo = [table]
    while todo and len(seen) < MAX_REACHED:
        parent = todo.pop()
        children = (
            (
                await conn.execute(
                    sa.text(
                        "SELECT DISTINCT m.name FROM sqlite_master m, "
                        "pragma_foreign_key_list(m.name) f "
                        "WHERE m.type = 'table' AND m.sql LIKE '%references%' "
                        'AND f."table" = :p COLLATE NOCASE'
                    ),
                    {"p": parent},
                )
            )
            .scalars()
            .all()
        )
        for child in children:
            if isinstance(child, str) and child not in seen:
                seen.append(child)
                todo.append(child)
    return seen


async def _our_triggers(conn: AsyncConnection, table: str) -> set[tuple[str, str]]:
    """The full-text triggers the platform made on ``table``, as (name, SQL): what
    :func:`ddl.fulltext_create` writes for the columns of its FTS table (one query; a
    trigger that matches runs only our statements, whatever those columns are)."""
    columns = (
        (
            await conn.execute(
                sa.text("SELECT name FROM pragma_table_info(:t) ORDER BY cid"),
                {"t": names.fts_table(table)},
            )
        )
        .scalars()
        .all()
    )
    if not columns or not all(isinstance(c, str) and "\x00" not in c for c in columns):
        return set()
    made = ddl.fulltext_create("sqlite", table, [str(c) for c in columns])
    made = [statement for statement in made if statement.startswith("CREATE TRIGGER")]
    return set(zip(names.fts_triggers(table), made, strict=True))
