"""Exceptions raised (and mostly dropped) per ``tools/call``, traced to Python lines.

Python 3.11 has no hook that sees every exception: ``sys.settrace``'s ``exception`` event
only fires when one reaches a Python frame, and an exception a C function raises and clears
itself (``hasattr``, a failed attribute lookup on a type, sqlite3's adapter protocol) never
does. So this runs ``bench/callpath_cost.py`` under gdb with a breakpoint on CPython's
``_PyErr_SetObject`` (where every exception is set, ``PyErr_Format`` and ``raise`` alike; its
inlined copies included), enabled between the two ``time.process_time()`` calls that bracket
the measured loop. At each hit gdb prints the exception's type and calls CPython's
``_Py_DumpTraceback`` (faulthandler's) for the thread that raised it: every thread counts, the
audit writer's too. Needs gdb and a CPython with symbols (pyenv's builds have them).

    .venv/bin/python bench/raised_per_call.py --era 2025 -n 100

Prints the exceptions per call by where they were raised (innermost frame) and the first
frame of AppDeck or uvicorn on the way (the caller that could avoid them). Under gdb a call
takes milliseconds, so the per-second background loops (HAProxy poll, sweeps) are stretched
into the window: the "background" lines are not per call. The audit writer wakes on its
own clock (0.25 s batches) and may write the window's rows after it: read its lines per audit
row, not per call (before bb251a8: 6 AttributeErrors a row, from sqlite3 binding NULLs).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

GDB_SCRIPT = """\
set pagination off
set confirm off
set breakpoint pending on
handle SIGPIPE nostop noprint pass
handle SIGUSR1 nostop noprint pass
handle SIGCHLD nostop noprint pass
set $brackets = 0
break time_process_time
commands
silent
set $brackets = $brackets + 1
if $brackets == 1
enable 2
else
disable 2
end
continue
end
break _PyErr_SetObject
disable 2
commands 2
silent
printf "@@EXC %s\\n", ((PyTypeObject*)exception)->tp_name
call (void)_Py_DumpTraceback(1, tstate)
continue
end
run
quit
"""

OURS = ("src/appdeck/", "/uvicorn/")


def short(frame: str) -> str:
    """``File "…/x.py", line 3 in f`` → ``x.py:3 f``, paths from site-packages or the repo."""
    text = frame.strip().removeprefix("File ").replace('"', "")
    for prefix in (str(ROOT) + "/", "site-packages/", "lib/python3.11/"):
        if prefix in text:
            text = text.split(prefix, 1)[1]
    return text.replace(", line ", ":").replace(" in ", " ")


def parse(out: str) -> list[tuple[str, list[str]]]:
    raised: list[tuple[str, list[str]]] = []
    for line in out.splitlines():
        if line.startswith("@@EXC "):
            raised.append((line[6:].strip(), []))
        elif raised and line.startswith("  File "):
            raised[-1][1].append(line)
    return raised


def where(frames: list[str]) -> str:
    text = "".join(frames)
    if "_write_forever" in text:
        return "audit writer"
    if "callpath_cost.py" not in text:
        return "other thread"
    if "run_asgi" in text or "data_received" in text:
        return "request"
    return "background"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=100, help="measured calls")
    parser.add_argument("--era", choices=["2025", "2026"], default="2025")
    parser.add_argument("--gdb", default="gdb")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".gdb") as script:
        script.write(GDB_SCRIPT)
        script.flush()
        command = [args.gdb, "-q", "-batch", "-x", script.name, "--args", sys.executable]
        command += ["callpath_cost.py", "-n", str(args.n), "--era", args.era]
        done = subprocess.run(command, cwd=BENCH, capture_output=True, text=True, timeout=1800)
    raised = parse(done.stdout)
    if not raised and "tools/call" not in done.stdout:
        sys.exit(done.stdout[-2000:] + done.stderr[-2000:])
    by_place: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
    by_where: collections.Counter[str] = collections.Counter()
    for kind, frames in raised:
        place = where(frames)
        by_where[place] += 1
        innermost = short(frames[0]) if frames else "(no Python frame)"
        caller = next((short(f) for f in frames if any(o in f for o in OURS)), "-")
        by_place[(place, kind, innermost, caller)] += 1
    n = args.n
    print(f"era {args.era}: {len(raised)} exceptions in {n} calls, {len(raised) / n:.2f} per call")
    for place, count in by_where.most_common():
        print(f"  {place:13} {count / n:6.2f} per call")
    print(f"\n{'per call':>8}  {'thread':13} exception: raised at  <-  first AppDeck/uvicorn frame")
    for (place, kind, innermost, caller), count in by_place.most_common(args.top):
        print(f"{count / n:8.2f}  {place:13} {kind}: {innermost}  <-  {caller}")


if __name__ == "__main__":
    main()
