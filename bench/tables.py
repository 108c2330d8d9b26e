"""App tables: insert throughput through RecordService against raw driver inserts in the same
run, and list and search latency at 100k rows, on SQLite and PostgreSQL (issue 10,
"Performance").

    .venv/bin/python bench/tables.py [--rows 100000] [--batches 20] [--queries 300]
                                     [--dialects sqlite,postgresql]

Each dialect gets a fresh platform database (SQLite: a temp dir; PostgreSQL: a database
``appdeck_bench_<hex>`` on ``APPDECK_BENCH_POSTGRES_URL``, default the test server) and the
apps' databases beside it (``open_databases``, as ``appdeck serve`` opens them; on PostgreSQL
with a role prefix of the run's own), one app, and two tables made by ``TableService.create``
with the same columns, an index on ``n`` and full text on ``title`` and ``body``: ``items``
(written through ``RecordService.insert``) and ``raw_items`` (written by the driver itself).

1. **Insert**: ``--batches`` batches of 1,000 rows each way, interleaved (the order alternates
   every batch). Records: ``RecordService.insert(principal, app, "items", rows)`` with JSON
   rows (timestamps as ISO strings), i.e. the role check, the schema read back, every value
   checked, one transaction. Raw: one transaction per batch on a connection of the driver's
   own, rows as plain tuples in the stored form: SQLite ``aiosqlite`` ``executemany``;
   PostgreSQL ``asyncpg`` ``executemany`` and ``copy_records_to_table`` (both reported). The
   full-text index is kept in sync by the same triggers (SQLite) or generated column (PG) on
   both tables. Reported: rows/s each way and records / raw.
2. **Read latency** once ``items`` holds ``--rows`` rows (filled through RecordService, not
   timed; PostgreSQL then ``ANALYZE``): ``--queries`` calls each, after 20 warm-up calls:
   ``list`` (filter ``n`` in a random 1% range, sort ``n`` desc, 50 rows), ``list page 2``
   (the same with the first page's cursor), ``list unfiltered`` (sort ``at`` desc, 50 rows),
   ``count`` (the 1% range), ``search`` one word (a 2,000-word vocabulary, each word in ~1.5%
   of the rows; 20 hits with snippets), ``search`` two words. Reported: p50 and p99 in ms.

Raw figures go to ``bench/.work/tables.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
from sqlalchemy.engine import make_url

from appdeck.auth.admin import IdentityAdmin
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.sources import SourceRoots
from appdeck.platform.tables.catalog import Column
from appdeck.platform.tables.databases import AppDatabases, apps_database_url, open_databases
from appdeck.platform.tables.ddl import IndexSpec
from appdeck.platform.tables.records_service import ListQuery, RecordService
from appdeck.platform.tables.schema_service import TableService
from appdeck.storage import Storage, default_sqlite_url
from appdeck.storage.apps import AppStore
from appdeck.storage.identity import IdentityStore

POSTGRES = os.environ.get(
    "APPDECK_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
WORK = Path(__file__).parent / ".work"
COLUMNS = (
    Column("title", "text", nullable=False),
    Column("body", "text"),
    Column("n", "integer"),
    Column("score", "real"),
    Column("at", "timestamp"),
    Column("done", "boolean"),
)
NAMES = ("title", "body", "n", "score", "at", "done")
BATCH = 1000
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Rig:
    dialect: str
    storage: Storage
    dbs: AppDatabases
    records: RecordService
    who: Principal
    app_id: int
    raw_target: str
    """SQLite: the app's file; PostgreSQL: the apps database's DSN."""


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < 2000:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def _row(rng: random.Random, words: list[str], i: int) -> dict[str, Any]:
    return {
        "title": " ".join(rng.choices(words, k=4)),
        "body": " ".join(rng.choices(words, k=30)),
        "n": rng.randrange(1_000_000),
        "score": rng.random() * 100,
        "at": (T0 + timedelta(seconds=i * 7 + rng.randrange(7))).isoformat(),
        "done": rng.random() < 0.5,
    }


def _raw(row: dict[str, Any], dialect: str) -> tuple[Any, ...]:
    """A row as the driver takes it (the stored form, as values.py makes it)."""
    at = datetime.fromisoformat(row["at"]).astimezone(UTC)
    if dialect == "sqlite":
        return (
            row["title"],
            row["body"],
            row["n"],
            row["score"],
            at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            int(row["done"]),
        )
    return (row["title"], row["body"], row["n"], row["score"], at, row["done"])


@asynccontextmanager
async def _rig(dialect: str) -> AsyncIterator[Rig]:
    work = Path(tempfile.mkdtemp(prefix=f"appdeck-bench-tables-{dialect}-"))
    data_dir = work / "data"
    prefix = f"bench{secrets.token_hex(3)}_app_"
    if dialect == "sqlite":
        url = default_sqlite_url(data_dir)
    else:
        name = f"appdeck_bench_{secrets.token_hex(4)}"
        await _pg_admin(f'CREATE DATABASE "{name}"')
        url = make_url(POSTGRES).set(database=name).render_as_string(hide_password=False)
    storage = await Storage.open(url)
    dbs = await open_databases(url, data_dir, role_prefix=prefix)
    try:
        identities = IdentityStore(storage.engine)
        admin = IdentityAdmin(identities)
        await admin.create_tenant("bench")
        user = await admin.create_user("bench", "bench", None, role="admin")
        who = Principal("bench", user.id, kind="oauth")
        feed = ChangeFeed()
        apps = AppService(
            AppStore(storage.engine),
            identities,
            feed,
            sources=SourceRoots([], data_dir=data_dir),
            max_apps=10,
            url_of=lambda name, tenant: f"http://{name}.{tenant}.localhost",
        )
        app_id = (await apps.register(who, "bench")).app.id
        tables = TableService(apps, dbs, feed)
        for table in ("items", "raw_items"):
            await tables.create(
                who,
                app_id,
                table,
                COLUMNS,
                indexes=[IndexSpec(("n",))],
                fulltext=("title", "body"),
            )
        if dialect == "sqlite":
            raw_target = str(data_dir / "appdb" / str(app_id) / "app.db")
        else:
            apps_url = make_url(apps_database_url(url)).set(drivername="postgresql")
            raw_target = apps_url.render_as_string(hide_password=False)
        yield Rig(dialect, storage, dbs, RecordService(apps, dbs), who, app_id, raw_target)
    finally:
        await dbs.close()
        await storage.close()
        if dialect == "postgresql":
            apps_db = make_url(apps_database_url(url)).database
            await _pg_admin(f'DROP DATABASE IF EXISTS "{apps_db}" WITH (FORCE)')
            await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn = await asyncpg.connect(_dsn(POSTGRES))
            try:
                for r in await conn.fetch(
                    "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)", prefix
                ):
                    await conn.execute(f'DROP ROLE "{r["rolname"]}"')
            finally:
                await conn.close()


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _pg_admin(statement: str) -> None:
    conn = await asyncpg.connect(_dsn(POSTGRES), timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


# -- 1. insert throughput ------------------------------------------------------------------


class RawWriter:
    """Raw driver inserts into ``raw_items``: one transaction per batch."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.sqlite: aiosqlite.Connection | None = None
        self.pg: asyncpg.Connection | None = None

    async def open(self) -> None:
        if self.rig.dialect == "sqlite":
            self.sqlite = await aiosqlite.connect(self.rig.raw_target)
            await self.sqlite.execute("PRAGMA journal_mode=WAL")
            await self.sqlite.execute("PRAGMA synchronous=NORMAL")
        else:
            self.pg = await asyncpg.connect(self.rig.raw_target)
            await self.pg.execute(f"SET search_path = app_{self.rig.app_id}")

    async def close(self) -> None:
        if self.sqlite is not None:
            await self.sqlite.close()
        if self.pg is not None:
            await self.pg.close()

    async def executemany(self, rows: list[tuple[Any, ...]]) -> None:
        cols = ", ".join(f'"{n}"' for n in NAMES)
        if self.sqlite is not None:
            marks = ", ".join("?" * len(NAMES))
            await self.sqlite.executemany(f"INSERT INTO raw_items ({cols}) VALUES ({marks})", rows)
            await self.sqlite.commit()
            return
        assert self.pg is not None
        marks = ", ".join(f"${i + 1}" for i in range(len(NAMES)))
        async with self.pg.transaction():
            await self.pg.executemany(f"INSERT INTO raw_items ({cols}) VALUES ({marks})", rows)

    async def copy(self, rows: list[tuple[Any, ...]]) -> None:
        assert self.pg is not None
        async with self.pg.transaction():
            await self.pg.copy_records_to_table(
                "raw_items",
                records=rows,
                columns=list(NAMES),
                schema_name=f"app_{self.rig.app_id}",
            )


async def measure_inserts(
    rig: Rig, batches: int, rng: random.Random, words: list[str]
) -> dict[str, Any]:
    raw = RawWriter(rig)
    await raw.open()
    ways: dict[str, Callable[[list[dict[str, Any]]], Awaitable[Any]]] = {
        "records": lambda rows: rig.records.insert(rig.who, rig.app_id, "items", rows),
        "raw executemany": lambda rows: raw.executemany([_raw(r, rig.dialect) for r in rows]),
    }
    if rig.dialect == "postgresql":
        ways["raw copy"] = lambda rows: raw.copy([_raw(r, rig.dialect) for r in rows])
    spent = dict.fromkeys(ways, 0.0)
    counter = 0
    try:
        for b in range(batches + 1):  # batch 0 warms every path up, not counted
            order = list(ways) if b % 2 == 0 else list(reversed(ways))
            for name in order:
                rows = [_row(rng, words, counter + i) for i in range(BATCH)]
                counter += BATCH
                start = time.perf_counter()
                await ways[name](rows)
                if b > 0:
                    spent[name] += time.perf_counter() - start
    finally:
        await raw.close()
    rates = {name: batches * BATCH / s for name, s in spent.items()}
    return {"rows_per_s": rates, "batches": batches}


# -- 2. read latency -----------------------------------------------------------------------


async def fill(rig: Rig, target: int, rng: random.Random, words: list[str]) -> None:
    have = await rig.records.count(rig.who, rig.app_id, "items")
    i = have
    while i < target:
        size = min(BATCH, target - i)
        await rig.records.insert(
            rig.who, rig.app_id, "items", [_row(rng, words, i + k) for k in range(size)]
        )
        i += size
    if rig.dialect == "postgresql":
        async with rig.dbs.transaction(rig.app_id, timeout_s=120) as conn:
            await conn.exec_driver_sql("ANALYZE items")


async def measure_reads(
    rig: Rig, queries: int, rng: random.Random, words: list[str]
) -> dict[str, Any]:
    r, who, app = rig.records, rig.who, rig.app_id

    def band() -> dict[str, Any]:
        low = rng.randrange(990_000)
        return {
            "and": [
                {"column": "n", "op": "gte", "value": low},
                {"column": "n", "op": "lt", "value": low + 10_000},
            ]
        }

    by_n = [{"column": "n", "direction": "desc"}]

    async def list_first() -> None:
        await r.list(who, app, "items", ListQuery(filter=band(), sort=by_n, limit=50))

    async def list_second() -> None:
        f = band()
        first = await r.list(who, app, "items", ListQuery(filter=f, sort=by_n, limit=50))
        start = time.perf_counter()
        await r.list(
            who, app, "items", ListQuery(filter=f, sort=by_n, limit=50, cursor=first.next_cursor)
        )
        second.append(time.perf_counter() - start)

    async def list_default() -> None:
        await r.list(who, app, "items", ListQuery())

    async def list_unindexed() -> None:
        await r.list(who, app, "items", ListQuery(sort=[{"column": "at", "direction": "desc"}]))

    async def count() -> None:
        await r.count(who, app, "items", band())

    async def search_one() -> None:
        await r.search(who, app, "items", rng.choice(words), limit=20)

    async def search_two() -> None:
        await r.search(who, app, "items", " ".join(rng.sample(words, 2)), limit=20)

    second: list[float] = []
    cases: dict[str, Callable[[], Awaitable[None]]] = {
        "list (filter 1% range, sort n desc, 50 rows)": list_first,
        "list first page (default order: id, 50 rows)": list_default,
        "list sorted by a column without index (at desc)": list_unindexed,
        "count (1% range)": count,
        "search one word (20 hits + snippets)": search_one,
        "search two words (20 hits + snippets)": search_two,
    }
    out: dict[str, Any] = {}
    for name, case in cases.items():
        for _ in range(20):
            await case()
        times = []
        for _ in range(queries):
            start = time.perf_counter()
            await case()
            times.append(time.perf_counter() - start)
        out[name] = _percentiles(times)
    for _ in range(20):
        await list_second()
    second.clear()
    for _ in range(queries):
        await list_second()
    out["list page 2 (cursor of page 1)"] = _percentiles(second)
    return out


def _percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "n": len(ordered)}


# -- run -----------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for dialect in args.dialects.split(","):
        rng = random.Random(7)
        words = _vocabulary(rng)
        async with _rig(dialect) as rig:
            inserts = await measure_inserts(rig, args.batches, rng, words)
            await fill(rig, args.rows, rng, words)
            reads = await measure_reads(rig, args.queries, rng, words)
        results[dialect] = {"insert": inserts, "reads": reads, "rows": args.rows}
        report(dialect, results[dialect])
    return results


def report(dialect: str, result: dict[str, Any]) -> None:
    rates = result["insert"]["rows_per_s"]
    print(f"\n## {dialect}: insert, {result['insert']['batches']} batches of {BATCH} rows")
    for name, rate in rates.items():
        ratio = rates["records"] / rate
        print(f"  {name:<18} {rate:>10,.0f} rows/s   records/this = {ratio:.2f}")
    print(f"## {dialect}: reads at {result['rows']:,} rows (p50 / p99 ms)")
    for name, p in result["reads"].items():
        print(f"  {name:<48} {p['p50_ms']:7.2f} / {p['p99_ms']:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dialects", default="sqlite,postgresql")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    WORK.mkdir(exist_ok=True)
    (WORK / "tables.json").write_text(json.dumps(results, indent=2))
    print(f"\nraw results: {WORK / 'tables.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
