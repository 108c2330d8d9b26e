"""What a test server's start costs (issue 26 §3): CPU of the tools' registration and of a
whole ``Services.start`` + ``stop`` on a migrated SQLite copy, the first in the process and
the mean of the next ones (a test worker starts hundreds of servers in one process).

    .venv/bin/python bench/server_start.py [--starts 6]

Before/after a change to ``src/``: run it with the other tree's ``src`` first on the path,
``PYTHONPATH=<other tree>/src .venv/bin/python bench/server_start.py``, alternating the two
in the same minutes. CPU is this process's own (``time.process_time``): the host probes'
subprocesses are not in it, wall time is printed beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import cast

from appdeck.app import Services
from appdeck.platform.services import Platform
from appdeck.protocol.registry import Registry
from appdeck.settings import Settings
from appdeck.storage import create_engine, default_sqlite_url, migrate
from appdeck.tools import families, register_all


def registration(starts: int) -> tuple[float, float]:
    """CPU seconds of ``register_all``: the first, then the mean of ``starts`` more."""
    list(families())  # the modules imported: not part of a start
    began = time.process_time()
    register_all(Registry(), cast(Platform, None))
    first = time.process_time() - began
    began = time.process_time()
    for _ in range(starts):
        register_all(Registry(), cast(Platform, None))
    return first, (time.process_time() - began) / starts


async def _template(directory: Path) -> Path:
    engine = create_engine(default_sqlite_url(directory))
    try:
        await migrate(engine)
    finally:
        await engine.dispose()
    return directory / "appdeck.db"


async def _one_start(template: Path, base: Path) -> tuple[float, float]:
    """CPU and wall seconds of one start + stop, on a copy of the migrated template."""
    (base / "db").mkdir(parents=True)
    (base / "src" / "hello").mkdir(parents=True)
    (base / "src" / "hello" / "app.py").write_text("print('hi')\n")
    shutil.copyfile(template, base / "db" / "appdeck.db")
    settings = Settings.model_validate(
        {
            "data_dir": base / "data",
            "database_url": default_sqlite_url(base / "db"),
            "source_roots": [base / "src"],
            "rate_limit_per_second": 0,
        }
    )
    cpu, wall = time.process_time(), time.perf_counter()
    services = await Services.start(settings)
    await services.stop(stop_apps=True)
    return time.process_time() - cpu, time.perf_counter() - wall


async def starts(count: int) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory(prefix="server-start-") as scratch:
        root = Path(scratch)
        template = await _template(root / "template")
        return [await _one_start(template, root / f"s{i}") for i in range(count + 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=6, help="warm starts after the first")
    args = parser.parse_args()
    os.environ.setdefault("APPDECK_INGRESS_PORT", "0")  # a dev server may hold 8088
    first, warm = registration(20)
    print(f"tools' registration CPU: first {first * 1000:.0f} ms, then {warm * 1000:.1f} ms")
    runs = asyncio.run(starts(args.starts))
    cpu = sum(c for c, _ in runs[1:]) / args.starts
    wall = sum(w for _, w in runs[1:]) / args.starts
    print(
        f"Services.start+stop: first {runs[0][0]:.3f} s CPU ({runs[0][1]:.3f} s wall), "
        f"then {cpu:.3f} s CPU ({wall:.3f} s wall) each"
    )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
