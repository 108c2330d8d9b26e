"""Deploy timings with real app processes: time from deploy to live for each strategy, and
the rollback switch while the old release is warm (target under 100 ms); sandboxed, not, or
both in the same run.

    .venv/bin/python bench/deploy.py [--rounds 3] [--sandbox on|off|both]

Runs the platform in-process (as appdeck serve does) with the fixture app
tests/fixtures/apps/hello, 2 instances, health check /healthz; canary steps 20% then 100%
with a 1 s analysis window (the window dominates the canary's time by design).

``--sandbox both`` starts one platform per setting (``Settings.sandbox`` ``off`` and ``on``,
each with its own data dir) and interleaves them: every round runs each strategy on both,
alternating which goes first. Every app is deployed once before timing, so every timed
deploy replaces a live release. The app runs as ``python3 app.py``: ``PATH`` is set to the
system's (:func:`use_system_python`), so that ``python3`` is the same interpreter inside the
sandbox and outside it (a pyenv shim on the server's ``PATH`` would add its own start-up).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.common.identity import Principal
from appdeck.settings import Settings

HELLO = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "apps" / "hello"
STRATEGIES = ("recreate", "rolling", "blue_green", "canary")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
RUN_COMMAND = "python3 app.py"


def use_system_python() -> None:
    """``python3`` resolves to the system interpreter for unsandboxed apps too (the sandbox's
    ``PATH`` is fixed: ``/usr/local/bin:/usr/bin:/bin`` after the workspace's own)."""
    os.environ["PATH"] = SYSTEM_PATH


@dataclass
class Timings:
    """One platform's figures (seconds)."""

    deploys: dict[str, list[float]] = field(default_factory=dict)
    switches: list[float] = field(default_factory=list)


@dataclass
class _Platform:
    mode: str
    work: Path
    services: Services
    who: Principal
    app_id: int


async def _open(mode: str) -> _Platform:
    work = Path(tempfile.mkdtemp(prefix=f"appdeck-bench-deploy-{mode}-"))
    shutil.copytree(HELLO, work / "src" / "hello")
    settings = Settings.model_validate(
        {
            "data_dir": work / "data",
            "source_roots": [work / "src"],
            "ingress_port": 0,
            "log_level": "warning",
            "sandbox": mode,
        }
    )
    services = await Services.start(settings)
    platform = services.platform
    assert platform is not None
    admin = IdentityAdmin(services.identities)
    await admin.create_tenant("bench")
    user = await admin.create_user("bench", "bench", None, role="admin")
    who = Principal("bench", user.id, kind="oauth")
    spec = {
        "source_path": str(work / "src" / "hello"),
        "run_command": RUN_COMMAND,
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "instances": 2,
        "canary": {"percent": 20, "steps": [20, 100], "analysis_window_s": 1.0},
    }
    app = (await platform.apps.register(who, "bench", spec)).app
    opened = _Platform(mode, work, services, who, app.id)
    await _deploy(opened, "rolling")  # a live release for the first timed deploy to replace
    return opened


async def _deploy(p: _Platform, strategy: str) -> float:
    deploys = p.services.platform.deploys  # type: ignore[union-attr]
    start = time.perf_counter()
    apps = p.services.platform.apps  # type: ignore[union-attr]
    app = (await apps.load(p.who, p.app_id, "deploy.write")).app  # the façade's check
    record = await deploys.run(*await deploys.create(app, p.who.user, strategy))
    elapsed = time.perf_counter() - start
    assert record.state == "live", (p.mode, strategy, record.status_message)
    return elapsed


async def _switch(p: _Platform) -> float:
    await _deploy(p, "blue_green")
    start = time.perf_counter()
    platform = p.services.platform
    assert platform is not None
    app = (await platform.apps.load(p.who, p.app_id, "deploy.write")).app  # the façade's check
    await platform.deploys.rollback(app)
    elapsed = time.perf_counter() - start
    await _deploy(p, "rolling")
    return elapsed


async def measure(modes: Sequence[str], rounds: int) -> dict[str, Timings]:
    """Deploy-to-live per strategy and warm rollbacks for each sandbox setting in ``modes``,
    interleaved round by round."""
    use_system_python()
    platforms: list[_Platform] = []
    results = {mode: Timings() for mode in modes}
    try:
        for mode in modes:
            platforms.append(await _open(mode))
        for round_no in range(rounds):
            order = platforms if round_no % 2 == 0 else platforms[::-1]
            for strategy in STRATEGIES:
                for p in order:
                    elapsed = await _deploy(p, strategy)
                    results[p.mode].deploys.setdefault(strategy, []).append(elapsed)
        for round_no in range(rounds):
            order = platforms if round_no % 2 == 0 else platforms[::-1]
            for p in order:
                results[p.mode].switches.append(await _switch(p))
    finally:
        for p in platforms:
            await p.services.stop(stop_apps=True)
            shutil.rmtree(p.work, ignore_errors=True)
    return results


def report(results: dict[str, Timings], rounds: int) -> None:
    print(f"deploy to live, 2 instances, median of {rounds} (each replaces a live release):")
    for mode, timings in results.items():
        for strategy, values in timings.deploys.items():
            print(
                f"  sandbox {mode:3s} {strategy:10s} {statistics.median(values) * 1000:8.0f} ms"
                "  (all: " + ", ".join(f"{v * 1000:.0f}" for v in values) + ")"
            )
    for mode, timings in results.items():
        print(
            f"rollback to a warm release, sandbox {mode}: median "
            f"{statistics.median(timings.switches) * 1000:.1f} ms (all: "
            + ", ".join(f"{v * 1000:.1f}" for v in timings.switches)
            + ")"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sandbox", choices=["on", "off", "both"], default="on")
    args = parser.parse_args()
    chosen = ("off", "on") if args.sandbox == "both" else (args.sandbox,)
    report(asyncio.run(measure(chosen, args.rounds)), args.rounds)
