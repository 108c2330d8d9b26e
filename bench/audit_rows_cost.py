"""What the audit writer thread spends per ``tools/call`` row on SQLite (issue 26 §1).

The writer thread shares the server's core with the event loop, but ``callpath_cost.py``
counts the loop's thread only. This writes ``--rows`` rows shaped as
``AuditLog.tool_called`` queues them (six of the fourteen values NULL) through
:class:`~appdeck.storage.audit.SqliteWriter`, in batches of ``--batch`` as the writer takes
them, into a fresh WAL database; the measured part runs inside ``sys.call_tracing`` for
callgrind, as in ``callpath_cost.py``:

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=sys_call_tracing \
        --callgrind-out-file=/tmp/rows.out .venv/bin/python bench/audit_rows_cost.py
    callgrind_annotate /tmp/rows.out | head -20     # "PROGRAM TOTALS" / --rows

``--without-null-adapter`` removes the NoneType adapter ``appdeck.storage.engine``
registers (the state before it: every NULL parameter raised and dropped an AttributeError).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from appdeck.storage import Storage, default_sqlite_url
from appdeck.storage.audit import SqliteWriter


def row(i: int) -> dict[str, Any]:
    return {
        "ts": time.time(),
        "tenant_id": "dev",
        "user_id": "dev",
        "client_id": None,
        "event": "tool_call",
        "method": "tools/call",
        "tool": "echo",
        "action": None,
        "app_id": None,
        "outcome": "ok",
        "status": 200,
        "duration_ms": 0.123,
        "request_id": str(i),
        "detail": None,
    }


async def write(writer: SqliteWriter, batches: list[list[dict[str, Any]]]) -> None:
    for batch in batches:
        await writer.append(batch)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--without-null-adapter", action="store_true")
    args = parser.parse_args()
    if args.without_null_adapter:
        sqlite3.adapters.pop((type(None), sqlite3.PrepareProtocol))
    data_dir = Path(tempfile.mkdtemp(prefix="appdeck-audit-rows-"))
    url = default_sqlite_url(data_dir)
    loop = asyncio.new_event_loop()
    storage = loop.run_until_complete(Storage.open(url))  # migrated, WAL
    writer = SqliteWriter(url.removeprefix("sqlite+aiosqlite:///"))
    loop.run_until_complete(write(writer, [[row(i) for i in range(args.batch)]]))  # warm-up
    rows = [row(i) for i in range(args.rows)]
    batches = [rows[i : i + args.batch] for i in range(0, len(rows), args.batch)]
    cpu = time.process_time()
    sys.call_tracing(loop.run_until_complete, (write(writer, batches),))
    used = time.process_time() - cpu
    print(f"{args.rows} rows in batches of {args.batch}: {used / args.rows * 1e6:.2f} µs CPU a row")
    loop.run_until_complete(writer.close())
    loop.run_until_complete(storage.close())
    loop.close()


if __name__ == "__main__":
    main()
