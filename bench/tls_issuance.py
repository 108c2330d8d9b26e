"""Certificate issuance against Pebble (issue 21, "Figures"): how long from an order's start
to the certificate stored and in the data plane, through the HAProxy data plane answering
HTTP-01 (as ``appdeck serve`` assembles it: ``tests/support/data_plane.py``), on SQLite. The first order includes the account's registration.

    .venv/bin/python -m bench.tls_issuance [orders]     # default 10

Pebble runs with ``PEBBLE_VA_NOSLEEP=1`` (no artificial validation delay) and without
authorization reuse, so every order is validated; a real CA adds its own queueing.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.support.challtestsrv import challtestsrv
from tests.support.data_plane import haproxy_plane
from tests.support.pebble import pebble

from appdeck.platform.crypto import Sealer
from appdeck.platform.tls import TlsConfig, TlsService
from appdeck.storage import Storage
from appdeck.storage.tls import WantedRow


class Names:
    def __init__(self) -> None:
        self.rows: list[WantedRow] = []

    async def wanted(self) -> list[WantedRow]:
        return list(self.rows)


async def main(orders: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        storage = await Storage.open(f"sqlite+aiosqlite:///{where / 'bench.db'}")
        try:
            async with (
                haproxy_plane(where / "plane") as router,
                challtestsrv() as dns,
                pebble(where, http_port=router.plane.port, dns=dns.dns_address) as ca,
            ):
                names = Names()
                service = TlsService(
                    storage.engine,
                    Sealer.from_settings("bench", where),
                    router.plane.certificates,
                    router.plane.challenges,
                    TlsConfig(directory=ca.directory, ca_bundle=ca.ca_bundle),
                    names=names,
                    replica="bench",
                    served=router.edge.sync,
                )
                await service.start()
                took = []
                for n in range(orders):
                    host = f"app{n}--bench.apps.example.test"
                    names.rows = [WantedRow(host, (host,), "app", "bench", n)]
                    began = time.perf_counter()
                    await service.reconcile()
                    async with asyncio.timeout(120):
                        await service.settled()
                    took.append(time.perf_counter() - began)
                    status = await service.status_of(host)
                    if status is None or status["state"] != "issued":
                        raise SystemExit(f"{host}: not issued: {status}")
        finally:
            await storage.close()
    later = sorted(took[1:]) or took
    print(f"orders: {orders}")
    print(f"first (with account registration): {took[0]:.2f} s")
    print(
        f"others: median {statistics.median(later):.2f} s, min {later[0]:.2f} s, "
        f"max {later[-1]:.2f} s"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
