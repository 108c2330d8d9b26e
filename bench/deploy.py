"""Deploy timings with real app processes: time from deploy to live for each strategy, and
the rollback switch while the old release is warm (target under 100 ms).

    .venv/bin/python bench/deploy.py [--rounds 3]

Runs the platform in-process (as appdeck serve does) with the fixture app
tests/fixtures/apps/hello, 2 instances, health check /healthz; canary steps 20% then 100%
with a 1 s analysis window (the window dominates the canary's time by design).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.common.identity import Principal
from appdeck.settings import Settings

HELLO = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "apps" / "hello"


async def main(rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="appdeck-bench-"))
    shutil.copytree(HELLO, work / "src" / "hello")
    settings = Settings.model_validate(
        {
            "data_dir": work / "data",
            "source_roots": [work / "src"],
            "ingress_port": 0,
            "log_level": "warning",
        }
    )
    services = await Services.start(settings)
    platform = services.platform
    assert platform is not None
    try:
        admin = IdentityAdmin(services.identities)
        await admin.create_tenant("bench")
        user = await admin.create_user("bench", "bench", None, role="admin")
        who = Principal("bench", user.id, kind="oauth")
        spec = {
            "source_path": str(work / "src" / "hello"),
            "run_command": f"{sys.executable} app.py",
            "health_check": {"path": "/healthz", "timeout_s": 2},
            "instances": 2,
            "canary": {"percent": 20, "steps": [20, 100], "analysis_window_s": 1.0},
        }
        app = (await platform.apps.register(who, "bench", spec)).app
        times: dict[str, list[float]] = {}
        for _ in range(rounds):
            for strategy in ("recreate", "rolling", "blue_green", "canary"):
                start = time.perf_counter()
                record = await platform.deploys.run(
                    *await platform.deploys.create(who, app.id, strategy)
                )
                assert record.state == "live", (strategy, record.status_message)
                times.setdefault(strategy, []).append(time.perf_counter() - start)
        switches = []
        for _ in range(rounds):
            await platform.deploys.run(*await platform.deploys.create(who, app.id, "blue_green"))
            start = time.perf_counter()
            await platform.ops.rollback(who, app.id)
            switches.append(time.perf_counter() - start)
            await platform.deploys.run(*await platform.deploys.create(who, app.id, "rolling"))
        print(f"deploy to live, 2 instances, median of {rounds} (first deploy excluded by order):")
        for strategy, values in times.items():
            print(
                f"  {strategy:10s} {statistics.median(values) * 1000:8.0f} ms  (all: "
                + ", ".join(f"{v * 1000:.0f}" for v in values)
                + ")"
            )
        print(
            f"rollback to a warm release: median {statistics.median(switches) * 1000:.1f} ms (all: "
            + ", ".join(f"{v * 1000:.1f}" for v in switches)
            + ")"
        )
    finally:
        await services.stop(stop_apps=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
