"""CPU of one forked ``appdeck serve`` start and stop, as the test suite starts its servers
(``tests/support/zygote.py``, issue 26 §3): the zygote's reaped children's CPU over ``-n``
starts (``start_appdeck`` until the URL and dev token are printed, then ``stop``), on SQLite
or on PostgreSQL + Redis (the replica set-up).

    .venv/bin/python bench/zygote_start.py [--db sqlite|postgresql] [-n 6]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tests.conftest as fixtures  # noqa: E402 - the repository's root first on the path
from tests.support import zygote  # noqa: E402
from tests.support.appdeck_process import clean_env, reap_haproxy, start_appdeck  # noqa: E402
from tests.support.redis import REDIS_URL  # noqa: E402


def reaped_cpu(pid: int) -> float:
    """The CPU seconds of ``pid`` and of its reaped children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / 100


async def main(db: str, n: int) -> None:
    env: dict[str, str] | None = None
    name = f"appdeck_zygote_bench_{secrets.token_hex(4)}"
    if db == "postgresql":
        fixtures._create_database(name)
        url = fixtures._url_of(name)
        fixtures._on_private_loop(fixtures.migrated(url))
        env = {
            "APPDECK_DATABASE_URL": url,
            "APPDECK_REDIS_URL": REDIS_URL,
            "APPDECK_REDIS_PREFIX": name,
            "APPDECK_SECRET_KEY": secrets.token_urlsafe(32),
            "APPDECK_PUBLIC_URL": "http://127.0.0.1:1",
        }
    try:
        pid = zygote.zygote(clean_env()).process.pid
        before = reaped_cpu(pid)
        for _ in range(n):
            work = Path(tempfile.mkdtemp(prefix="zygote-bench-"))
            server = await start_appdeck(work / "data", log_dir=work / "logs", env=env)
            await server.stop()
            reap_haproxy(work)  # it outlives the server by design
        await asyncio.sleep(0.5)
        print(f"{db}: {(reaped_cpu(pid) - before) / n:.3f} CPU-s a forked start and stop")
    finally:
        if db == "postgresql":
            drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
            fixtures._on_private_loop(fixtures._admin(drop))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("-n", type=int, default=6)
    args = parser.parse_args()
    asyncio.run(main(args.db, args.n))
