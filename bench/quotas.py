"""What the tenant-quota check adds to a spec write (issue 19, finding 3).

    .venv/bin/python bench/quotas.py [--apps 100] [--writes 300] [postgresql+asyncpg://…]

``AppStore.update_spec`` of one app of a tenant holding ``--apps`` apps, ``--writes`` times
without a check and with ``quotas.guard`` (the check reads every app's spec and its live and
in-progress deployments' in the write transaction), on a fresh SQLite file or the given
PostgreSQL database (created tables; drop it afterwards). Prints ms per write for each.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from appdeck.model import specs
from appdeck.platform import quotas
from appdeck.storage import Storage
from appdeck.storage.apps import AppStore
from appdeck.storage.engine import default_sqlite_url


async def measure(url: str, apps: int, writes: int) -> None:
    storage = await Storage.open(url)
    try:
        store = AppStore(storage.engine)
        spec = specs.validate({"resources": {"memory_mb": 32, "disk_mb": 64}})
        made = [await store.create("t", f"a{i}", None, spec, "u") for i in range(apps)]
        roomy = quotas.Limits(tenant_memory_mb=10**6, tenant_instances=10**4, tenant_disk_mb=10**6)
        for label, checked in (("without the check", False), ("with the quota check", True)):
            started = time.perf_counter()
            for i in range(writes):
                changed = {**spec, "instances": 1 + i % 2}
                check = quotas.guard(roomy, made[0].id, changed) if checked else None
                await store.update_spec(made[0], changed, check)
            per = (time.perf_counter() - started) / writes * 1000
            print(f"{storage.engine.dialect.name}, {apps} apps: update_spec {label}: {per:.2f} ms")
    finally:
        await storage.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url", nargs="?")
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--writes", type=int, default=300)
    args = parser.parse_args()
    url = args.url or default_sqlite_url(Path(tempfile.mkdtemp()))
    asyncio.run(measure(url, args.apps, args.writes))


if __name__ == "__main__":
    main()
