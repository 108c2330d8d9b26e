"""A SQLite database at the newest schema, migrated once per process (each xdist worker):
servers and fixtures start from a copy of it instead of migrating from zero (0.3-0.5 s of CPU
each). The tests of a fresh install (``tests/cli/test_serve.py``'s own processes,
``tests/e2e/test_server_process.py``) still start on empty data directories."""

from __future__ import annotations

import asyncio
import atexit
import functools
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from appdeck.storage import create_engine, default_sqlite_url, migrate


@functools.cache
def sqlite_template() -> Path:
    """The migrated file (``appdeck.db`` in a directory removed when the process exits)."""
    directory = Path(tempfile.mkdtemp(prefix="appdeck-template-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    url = default_sqlite_url(directory)
    # on a loop of its own, in a thread: callers may be inside a running loop
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, migrated(url)).result(timeout=120)
    return directory / "appdeck.db"


def copy_into(data_dir: Path) -> None:
    """Put a copy of the template where a server whose data directory is ``data_dir`` keeps
    its database (``appdeck.db``), unless one is there already."""
    data_dir.mkdir(parents=True, exist_ok=True)
    target = data_dir / "appdeck.db"
    if not target.exists():
        shutil.copyfile(sqlite_template(), target)


async def migrated(url: str) -> None:
    """Migrate the database at ``url`` to the newest schema."""
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()
