"""CPU time of one ``SessionStore.subscribers`` lookup: the fan-out's question "which sessions
follow this URI" (issue 26 §4), over ``--sessions`` sessions that all follow it (as in
``bench/fanout.py``) beside a few that do not. The process's CPU time (``time.process_time``,
the database's own work included on SQLite, not on PostgreSQL's server) per lookup, the
median over ``--batches`` of ``--repeat`` lookups. Before/after: the same command with the
older checkout's ``src`` first on the path (the script prints which ``appdeck`` it ran):

    .venv/bin/python bench/session_lookup.py                          # SQLite, a temp file
    PYTHONPATH=/tmp/appdeck-base/src .venv/bin/python bench/session_lookup.py
    .venv/bin/python bench/session_lookup.py --url postgresql+asyncpg://postgres@127.0.0.1:5432/x
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import appdeck
from appdeck.protocol.sessions import Session
from appdeck.storage import Storage

URI = "appdeck://apps"


def _session(n: int, subscriptions: set[str]) -> Session:
    return Session(
        id=f"s{n:05d}",
        tenant="acme",
        user="bench",
        protocol_version="2025-11-25",
        client_info={"name": "bench", "version": "1"},
        client_capabilities={},
        created_at=1_700_000_000.0,
        last_active=1_700_000_000.0,
        subscriptions=subscriptions,
    )


async def _run(url: str, sessions: int, repeat: int, batches: int) -> None:
    storage = await Storage.open(url)
    try:
        for n in range(sessions):
            await storage.sessions.insert(_session(n, {URI}))
        for n in range(sessions, sessions + 10):
            await storage.sessions.insert(_session(n, {"appdeck://apps/other"}))
        found = await storage.sessions.subscribers(URI, "acme")
        assert len(found) == sessions, len(found)
        per: list[float] = []
        for _ in range(batches):
            start = time.process_time()
            for _ in range(repeat):
                await storage.sessions.subscribers(URI, "acme")
            per.append((time.process_time() - start) / repeat * 1000)
    finally:
        await storage.close()
    print(
        f"{appdeck.__file__}\n{url.split(':')[0]}: {sessions} subscribers, "
        f"CPU per lookup median {statistics.median(per):.2f} ms "
        f"(min {min(per):.2f}, max {max(per):.2f}); load {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a fresh database (default: a temporary SQLite file)")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--batches", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite+aiosqlite:///{tmp}/lookup.db"
        asyncio.run(_run(url, args.sessions, args.repeat, args.batches))


if __name__ == "__main__":
    main()
