"""A stand-in for the AppDeck server in the adoption tests (run with ``sys.executable``).

It prepares and starts the hello app through a :class:`LocalDriver` on ``runtime_dir``, waits
until it is healthy, prints the instance as one JSON line on stdout, then either waits to be
killed (``--then wait``, at most 60 s) or dies at once without any cleanup (``--then exit``,
``os._exit``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

from appdeck.model.release import AppSpec, Release
from appdeck.runtime import LocalDriver


async def serve(runtime_dir: Path, source: Path, port: int, then: str) -> None:
    driver = LocalDriver(runtime_dir)
    spec = Release(
        12,
        "hello",
        1,
        AppSpec.from_dict(
            {
                "runtime": "command",
                "run_command": f"exec {shlex.quote(sys.executable)} app.py",
                "health_check": {"path": "/healthz", "timeout_s": 1.0},
            }
        ),
        {"GREETING": "from before the crash"},
        route="hello--test",
        source_path=source,
    )
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, port)
    async with asyncio.timeout(20):
        while not (await driver.check(ref)).ok:  # noqa: ASYNC110 - a bounded poll
            await asyncio.sleep(0.05)
    print(json.dumps(asdict(ref)), flush=True)
    if then == "exit":
        os._exit(0)
    await asyncio.sleep(60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runtime_dir", type=Path)
    parser.add_argument("source", type=Path)
    parser.add_argument("port", type=int)
    parser.add_argument("--then", choices=["wait", "exit"], default="wait")
    args = parser.parse_args()
    asyncio.run(serve(args.runtime_dir, args.source, args.port, args.then))


if __name__ == "__main__":
    main()
