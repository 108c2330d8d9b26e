"""What one ``appdeck serve`` process costs the test suite to start (issue 26 §3): started as
the e2e tests start it (``--port 0 --with-conformance-fixtures --dev`` on a fresh data dir,
the sandbox on), timed until it printed its URL and dev token, then stopped (SIGTERM). CPU is
the server's own, user + system, read from its ``/proc/<pid>/stat`` when it is ready (its
children, the host probes, are not in it); the suite starts hundreds of such processes.

    .venv/bin/python bench/serve_process_start.py [--starts 5]

Before/after a change to ``src/``: ``PYTHONPATH=<other tree>/src`` in front (the server
process inherits it), alternating the two in the same minutes; the 1-minute load is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY = re.compile(r"MCP server listening on .*\n(?s:.*)Dev access token[^\n]*:\n\S+\n")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (``/proc/<pid>/stat``, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def one_start(appdeck: list[str], within: float = 90.0) -> tuple[float, float]:
    """(seconds to ready, CPU seconds to ready) of one server."""
    with tempfile.TemporaryDirectory(prefix="appdeck-start-") as tmp:
        out = Path(tmp) / "stdout"
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPDECK_")}
        env |= {"PYTHONUNBUFFERED": "1", "APPDECK_SANDBOX": "on"}
        command = [*appdeck, "serve", "--port", "0", "--ingress-port", "0", "--dev"]
        command += ["--data-dir", f"{tmp}/data", "--with-conformance-fixtures"]
        with out.open("wb") as stdout:
            started = time.monotonic()
            process = subprocess.Popen(
                command, stdout=stdout, stderr=subprocess.DEVNULL, env=env, start_new_session=True
            )
        try:
            while not READY.search(out.read_text(errors="replace")):
                if process.poll() is not None or time.monotonic() - started > within:
                    raise RuntimeError(f"appdeck serve did not start: {out.read_text()[-500:]}")
                time.sleep(0.02)
            ready = time.monotonic() - started
            cpu = cpu_seconds(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
            stop_data_plane(Path(tmp) / "data")
        return ready, cpu


def stop_data_plane(data_dir: Path) -> None:
    """Kill the install's HAProxy: the data plane outlives ``appdeck serve`` by design."""
    try:
        install = json.loads((data_dir / "install.json").read_text())["id"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    mark = f"/{install}/haproxy/".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            continue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    # `python -m appdeck`, the program the `appdeck` script runs: a PYTHONPATH in front applies
    appdeck = [sys.executable, "-m", "appdeck"]
    one_start(appdeck)  # bytecode written, page cache warm: not counted
    walls, cpus = [], []
    for _ in range(args.starts):
        wall, cpu = one_start(appdeck)
        walls.append(wall)
        cpus.append(cpu)
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"appdeck serve to ready, {args.starts} starts: wall mean {sum(walls) / len(walls):.2f} s"
        f" (min {min(walls):.2f}), CPU mean {sum(cpus) / len(cpus):.2f} s"
        f" (min {min(cpus):.2f}); load {load}"
    )


if __name__ == "__main__":
    main()
