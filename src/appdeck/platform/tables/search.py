"""Full-text search over a table's declared full-text columns, as one SQLAlchemy statement.

    SQLite      "<t>__fts" MATCH <terms>, ranked by bm25(), highlights by :func:`mark`
    PostgreSQL  "__fts" @@ websearch_to_tsquery('simple', q), ranked by ts_rank(),
                highlights by ts_headline() on the page's rows only

The query text is always a bound parameter. For FTS5 it is also turned into quoted terms
first: FTS5 has a query language of its own (``col:term``, ``NEAR(...)``, ``*``, ``AND``,
parentheses) whose syntax errors and column filters a caller must not reach, so every
whitespace-separated word becomes one double-quoted string (``"`` doubled inside), and the
words are ANDed. PostgreSQL's ``websearch_to_tsquery`` never fails on its input (quoted
phrases, ``or`` and ``-word`` work there, as in a web search box).

Highlights are wrapped in ``<mark>`` and ``</mark>``; rank is higher for better matches.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy.sql.elements import quoted_name
from sqlalchemy.sql.expression import ColumnClause, ColumnElement

from appdeck.common.errors import InvalidArgument
from appdeck.platform.tables import names, values
from appdeck.platform.tables.catalog import Column, TableSchema
from appdeck.platform.tables.filters import bound, readable

Dialect = Literal["sqlite", "postgresql"]

MAX_QUERY: Final = 1000
MAX_TERMS: Final = 32
MARK: Final = ("<mark>", "</mark>")
SNIPPET_CHARS: Final = 2000
"""A snippet is cut there: its words are the app's, and one word may be a megabyte long."""
SNIPPET_SCAN: Final = 4000
"""SQLite: characters of each full-text column read to make the snippet from (:func:`mark`)."""
SNIPPET_AROUND: Final = 120
_HEADLINE: Final = "StartSel=<mark>, StopSel=</mark>, MaxWords=24, MinWords=8, MaxFragments=2"


def checked_query(text: Any) -> str:
    """The caller's search text, or an error on ``query``."""
    value = values.check(text, "text", field="query")
    if not value.strip():
        raise InvalidArgument("query: empty", field="query")
    if len(value) > MAX_QUERY:
        raise InvalidArgument(f"query: longer than {MAX_QUERY} characters", field="query")
    return str(value)


def fts5_terms(text: str) -> str | None:
    """Free text as an FTS5 query of quoted terms, ANDed; None when no word is left (a
    query of punctuation only finds nothing, as on PostgreSQL)."""
    words = [w for w in text.split() if any(ch.isalnum() for ch in w)]
    if len(words) > MAX_TERMS:
        raise InvalidArgument(f"query: more than {MAX_TERMS} words", field="query")
    if not words:
        return None
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


def statement(
    schema: TableSchema,
    table: sa.TableClause,
    dialect: Dialect,
    *,
    query: str,
    shown: Sequence[Column],
    where: ColumnElement[bool] | None,
    offset: int,
    limit: int,
) -> sa.Select[Any]:
    """The page of matching rows: the ``shown`` columns, then ``_rank`` and ``_snippet``."""
    if dialect == "sqlite":
        return _sqlite(schema, table, query, shown, where, offset, limit)
    return _postgresql(schema, table, query, shown, where, offset, limit)


def _sqlite(
    schema: TableSchema,
    table: sa.TableClause,
    query: str,
    shown: Sequence[Column],
    where: ColumnElement[bool] | None,
    offset: int,
    limit: int,
) -> sa.Select[Any]:
    fts_name = names.fts_table(schema.name)
    fts = sa.table(quoted_name(fts_name, quote=True), sa.column("rowid"))
    hidden: ColumnClause[Any] = sa.literal_column(
        names.quote(fts_name)
    )  # the FTS5 table's own column
    rank = sa.func.bm25(hidden)
    # not FTS5's snippet(): it takes time quadratic in the matches of a value (8 s for a
    # 200 KB value of one repeated word, minutes at 1 MB) inside one step of the VM, where
    # the progress handler cannot stop it; the start of each text is read, marked in Python
    texts: list[ColumnElement[Any]] = [
        sa.func.substr(sa.func.coalesce(table.c[c], ""), 1, SNIPPET_SCAN) for c in schema.fulltext
    ]
    snippet = functools.reduce(lambda a, b: a + " " + b, texts)  # || (no concat_ws in 3.40)
    stmt = (
        sa.select(
            *[readable(table, c, "sqlite") for c in shown],
            (-rank).label("_rank"),
            snippet.label("_snippet"),
        )
        .select_from(table.join(fts, fts.c.rowid == table.c[names.ID]))
        .where(hidden.op("MATCH")(bound(query)))
    )
    if where is not None:
        stmt = stmt.where(where)
    return stmt.order_by(rank, table.c[names.ID]).limit(limit).offset(offset)


def _postgresql(
    schema: TableSchema,
    table: sa.TableClause,
    query: str,
    shown: Sequence[Column],
    where: ColumnElement[bool] | None,
    offset: int,
    limit: int,
) -> sa.Select[Any]:
    config: ColumnClause[Any] = sa.literal_column("'simple'::regconfig")
    tsquery = sa.func.websearch_to_tsquery(config, bound(query))
    vector: ColumnClause[Any] = sa.literal_column(
        f"{names.quote(schema.name)}.{names.quote(names.FTS_COLUMN)}"
    )
    ident = table.c[names.ID]
    rank = sa.func.ts_rank(vector, tsquery)
    inner = sa.select(ident.label("hit_id"), rank.label("hit_rank")).where(vector.op("@@")(tsquery))
    if where is not None:
        inner = inner.where(where)
    page = inner.order_by(sa.desc("hit_rank"), ident).limit(limit).offset(offset).subquery("hits")
    document = sa.func.concat_ws(" ", *[table.c[c] for c in schema.fulltext])
    headline = sa.func.ts_headline(config, document, tsquery, sa.literal_column(f"'{_HEADLINE}'"))
    return (
        sa.select(
            *[readable(table, c, "postgresql") for c in shown],
            page.c.hit_rank.label("_rank"),
            headline.label("_snippet"),
        )
        .select_from(table.join(page, page.c.hit_id == ident))
        .order_by(page.c.hit_rank.desc(), ident)
    )


def mark(text: str, query: str) -> str:
    """SQLite's snippet: the text around the first word of ``query`` found in ``text``, each
    word of the query in it wrapped in :data:`MARK` (linear in the text, which is at most
    :data:`SNIPPET_SCAN` characters a column)."""
    words = {w.casefold() for w in re.findall(r"\w+", query)}
    if not words:
        return text[: 2 * SNIPPET_AROUND]
    found = [m for m in re.finditer(r"\w+", text) if m.group().casefold() in words]
    start = max(0, found[0].start() - SNIPPET_AROUND) if found else 0
    end = min(len(text), start + 2 * SNIPPET_AROUND)
    out, at = [], start
    for m in found:
        if m.start() < start:
            continue
        if m.end() > end:
            break
        out += [text[at : m.start()], MARK[0], m.group(), MARK[1]]
        at = m.end()
    out.append(text[at:end])
    return ("…" if start > 0 else "") + "".join(out) + ("…" if end < len(text) else "")
