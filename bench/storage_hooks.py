"""What timing database statements and Redis commands costs (issue 23): the same loop on a
watched engine/client and a plain one, alternating rounds; this process's CPU microseconds
per operation (CPU, not wall time: the server's side and other load on the machine stay out;
the minimum and the median over the rounds are printed).

    .venv/bin/python bench/storage_hooks.py [--n 3000] [--rounds 5]
        [--postgres postgresql+asyncpg://...] [--redis redis://127.0.0.1:6379/0]

SQLite: a temporary file; PostgreSQL and Redis: skipped when not reachable (said so).

First, the hooks alone, where a loaded machine's noise cannot hide them (best of 7 repeats
of ``timeit``): ``SELECT 1`` on an in-memory SQLite through a *sync* engine with and without
the same listeners, and the ``TimedRedis`` wrapper around a stub ``execute_command`` that
returns at once. The loops after it are end to end, as the platform runs them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.events.cluster import bounded
from appdeck.observability.storage import watch_database
from appdeck.observability.timed_redis import TimedRedis
from appdeck.storage.engine import create_engine, default_sqlite_url

Op = Callable[[], Awaitable[object]]


async def _per_op(op: Op, n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        await op()
    return (time.process_time() - started) / n * 1e6


async def compare(name: str, plain: Op, watched: Op, n: int, rounds: int) -> None:
    for op in (plain, watched):  # warm up: connections open, statements cached
        await _per_op(op, n // 10)
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        a.append(await _per_op(plain, n))
        b.append(await _per_op(watched, n))
    for how, pick in (("min", min), ("median", statistics.median)):
        pa, pb = pick(a), pick(b)
        print(
            f"{name:<22} {how:<6} plain {pa:7.1f} µs  timed {pb:7.1f} µs  "
            f"({pb - pa:+.1f} µs, {100 * (pb - pa) / pa:+.1f} %)"
        )


def _select(engine: AsyncEngine) -> Op:
    async def op() -> object:
        async with engine.connect() as conn:
            return await conn.scalar(sa.select(sa.literal(1)))

    return op


async def database(label: str, url: str, n: int, rounds: int) -> None:
    plain, watched = create_engine(url), create_engine(url)
    watch_database(watched)
    try:
        await compare(f"{label} SELECT 1", _select(plain), _select(watched), n, rounds)
    finally:
        await plain.dispose()
        await watched.dispose()


async def redis(url: str, n: int, rounds: int) -> None:
    plain: Redis = bounded(url, 8, 5.0, cls=Redis)
    timed: Redis = bounded(url, 8, 5.0, cls=TimedRedis)
    try:
        await compare("Redis PING", plain.ping, timed.ping, n, rounds)
    finally:
        await plain.aclose()
        await timed.aclose()


def hooks_alone(n: int = 20_000) -> None:
    import timeit

    from sqlalchemy import create_engine as create_sync_engine
    from sqlalchemy import event

    from appdeck.observability import storage as metrics

    def best(statement: Callable[[], object]) -> float:
        return min(timeit.repeat(statement, number=n, repeat=7)) / n * 1e6

    plain, timed = (create_sync_engine("sqlite://") for _ in range(2))
    hooks = metrics._TimedExecute(timed.dialect, metrics.STORAGE.db["sqlite"])
    event.listen(timed, "do_execute", hooks.execute)
    event.listen(timed, "do_execute_no_params", hooks.execute_no_params)
    with plain.connect() as a, timed.connect() as b:
        pa = best(lambda: a.exec_driver_sql("SELECT 1").scalar())
        pb = best(lambda: b.exec_driver_sql("SELECT 1").scalar())
    print(
        f"hooks: sync in-memory SQLite SELECT 1: {pa:.2f} µs plain, {pb:.2f} µs timed ({pb - pa:+.2f} µs)"
    )

    class Stub:
        async def execute_command(self, *args: object) -> object:
            return args

    class Wrapped(Stub):
        async def execute_command(self, *args: object) -> object:
            started = time.perf_counter()
            try:
                return await super().execute_command(*args)
            finally:
                metrics.STORAGE.redis.observe(time.perf_counter() - started)

    def drive(client: Stub) -> Callable[[], object]:
        def run() -> object:
            coroutine = client.execute_command("PING")
            try:
                coroutine.send(None)
            except StopIteration as done:
                return done.value
            raise AssertionError("the stub never waits")

        return run

    sa_, sb = best(drive(Stub())), best(drive(Wrapped()))
    print(
        f"hooks: Redis execute_command on a stub: {sa_:.2f} µs plain, {sb:.2f} µs timed ({sb - sa_:+.2f} µs)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", default="postgresql+asyncpg://postgres@127.0.0.1/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    hooks_alone()
    with tempfile.TemporaryDirectory() as tmp:
        await database("SQLite", default_sqlite_url(Path(tmp)), args.n, args.rounds)
    try:
        await database("PostgreSQL", args.postgres, args.n, args.rounds)
    except OSError as exc:
        print(f"PostgreSQL skipped: {exc}")
    try:
        await redis(args.redis, args.n, args.rounds)
    except OSError as exc:
        print(f"Redis skipped: {exc}")


if __name__ == "__main__":
    asyncio.run(main())
