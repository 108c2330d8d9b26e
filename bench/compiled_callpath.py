"""The call path's hot modules compiled with mypyc, against the same modules interpreted: one of
the three ways to 6x that issue 26 §1 left open, measured (2026-11-29, twelfth session).

Copies ``src/`` to a scratch directory, compiles :data:`HOT` there with mypyc (the modules
``bench/callpath_opcodes.py`` finds on a ``tools/call``; they are mypy-strict already), then
alternates ``callpath_cost.py`` runs on the interpreted tree and on the compiled one (its
``src`` first on ``PYTHONPATH``), both on one core, and prints the CPU per call of each round.

    .venv/bin/python bench/compiled_callpath.py [--rounds 5] [-n 5000] [--keep DIR]

The instructions per call of the compiled tree, for callgrind's deterministic count, with the
directory kept (``--keep /tmp/compiled``)::

    PYTHONPATH=/tmp/compiled/src valgrind --tool=callgrind --collect-atstart=no \\
        --toggle-collect=sys_call_tracing .venv/bin/python bench/callpath_cost.py -n 2000

``auth/audit.py`` is left out: mypyc 1.x/2.x names its ``_thread`` attribute ``__thread`` in
the generated C, a GCC keyword, and the build fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import callpath_ratio

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
HOT = [
    "appdeck/protocol/server.py",
    "appdeck/transport/mcp_http.py",
    "appdeck/protocol/tools_feature.py",
    "appdeck/protocol/jsonrpc.py",
    "appdeck/transport/responses.py",
    "appdeck/protocol/inbound.py",
    "appdeck/protocol/sessions.py",
    "appdeck/protocol/validation.py",
    "appdeck/protocol/outcomes.py",
    "appdeck/protocol/context.py",
    "appdeck/transport/guard.py",
    "appdeck/auth/bearer.py",
    "appdeck/auth/ratelimit.py",
    "appdeck/observability/mcp.py",
]
MYPY_INI = """[mypy]
strict = True
python_version = 3.11
warn_unreachable = True
[mypy-uvloop.*]
ignore_missing_imports = True
[mypy-asyncpg.*]
ignore_missing_imports = True
"""


def compile_tree(scratch: Path) -> Path:
    src = scratch / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    (scratch / "mypy.ini").write_text(MYPY_INI)
    mypyc = Path(sys.executable).parent / "mypyc"
    print(f"compiling {len(HOT)} modules with mypyc in {src} (about a minute) ...", flush=True)
    subprocess.run(
        [str(mypyc), "--config-file", str(scratch / "mypy.ini"), *HOT],
        cwd=src,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return src


def per_call(n: int, pythonpath: Path | None) -> float:
    """CPU µs per call of one ``callpath_cost.py`` run on core 0, ``pythonpath`` first."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return callpath_ratio.per_call(["-n", str(n)], 0, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--keep", type=Path, default=None, help="build here and keep it")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="appdeck-mypyc-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        src = compile_tree(scratch)
        print(f"{'round':>5} {'interpreted µs':>15} {'compiled µs':>12}")
        for index in range(args.rounds):
            if index % 2 == 0:
                plain, compiled = per_call(args.n, None), per_call(args.n, src)
            else:
                compiled, plain = per_call(args.n, src), per_call(args.n, None)
            print(f"{index + 1:>5} {plain:>15.1f} {compiled:>12.1f}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
