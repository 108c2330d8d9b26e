"""Python bytecodes executed per ``tools/call``, by file and by function (issue 26 §1): the
server and in-memory harness of ``callpath_cost.py`` under a tracer that counts every opcode of
the event loop's thread (``sys.settrace`` with ``f_trace_opcodes``). Deterministic like
callgrind's counts (a loaded machine does not change them) but by Python function; what C does
for a bytecode (orjson, SQLite, the dict lookups) is not weighed.

    .venv/bin/python bench/callpath_opcodes.py [-n 300] [--era 2026] [--top 40]
"""

from __future__ import annotations

import argparse
import collections
import sys
from types import CodeType, FrameType
from typing import Any

import callpath_cost as cc


def where(code: CodeType) -> str:
    return code.co_filename.split("site-packages/")[-1].split("/src/")[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--era", choices=["2025", "2026"], default="2025")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    loop, services, poster, bodies = cc.quiet_server(args.era)
    opcodes: collections.Counter[CodeType] = collections.Counter()
    frames: collections.Counter[CodeType] = collections.Counter()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            opcodes[frame.f_code] += 1
        return local

    def started(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frames[frame.f_code] += 1
        return local

    sys.settrace(started)
    try:
        loop.run_until_complete(cc.measure(poster, bodies[: args.n]))
    finally:
        sys.settrace(None)
    n = args.n
    print(
        f"{args.era}: {sum(opcodes.values()) / n:,.0f} opcodes and "
        f"{sum(frames.values()) / n:,.0f} frames a call"
    )
    files: collections.Counter[str] = collections.Counter()
    for code, count in opcodes.items():
        files[where(code)] += count
    print("-- by file")
    for name, count in files.most_common(args.top // 2):
        print(f"{count / n:8,.0f}  {name}")
    print("-- by function (its own opcodes; calls a call)")
    for code, count in opcodes.most_common(args.top):
        print(
            f"{count / n:8,.0f} {frames[code] / n:5.1f}  "
            f"{where(code)}:{code.co_firstlineno} {code.co_qualname}"
        )
    loop.run_until_complete(services.stop(stop_apps=True))


if __name__ == "__main__":
    main()
