"""What a ``tools/call``'s CPU is made of, in memory (issue 26 §1): the same server and
in-memory transport as ``callpath_cost.py``, alternating three cases, CPU per call of each
thread (``/proc/self/task``):

- ``appdeck``: the whole stack, as ``callpath_cost.py`` measures it;
- ``no-audit``: the same with ``McpServer.audit`` set to None (no audit row, no activity line);
- ``floor``: a trivial ASGI app (a fixed JSON answer) behind the same uvicorn protocol
  (``bounded_protocol``, as ``appdeck serve`` runs it) and the same harness: what HTTP/1.1
  parsing, uvicorn's request cycle, its Task and the harness cost without AppDeck.

    .venv/bin/python bench/callpath_parts.py [-n 20000] [--rounds 3] [--era 2026]

Natively measured, so noisy on a shared machine: read the alternated rounds together.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from typing import Any

import callpath_cost as cc

_ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}]}}'


async def trivial(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(_ANSWER))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _ANSWER})


def thread_cpu() -> dict[str, float]:
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[names.get(tid, tid)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def main(n: int, rounds: int, era: str) -> None:
    import uvloop

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    services, poster, bodies = loop.run_until_complete(cc.setup(era))
    cc.pause_background(services)
    floor = cc.memory_poster(trivial, services.settings)
    server, audit = services.server, services.server.audit
    loop.run_until_complete(asyncio.sleep(0.1))
    for round_ in range(rounds):
        for case in ("appdeck", "no-audit", "floor"):
            server.audit = None if case == "no-audit" else audit
            before, cpu = thread_cpu(), time.process_time()
            loop.run_until_complete(cc.measure(floor if case == "floor" else poster, bodies[:n]))
            used, after = time.process_time() - cpu, thread_cpu()
            threads = {
                name: round((after[name] - before.get(name, 0.0)) / n * 1e6, 1)
                for name in after
                if after[name] - before.get(name, 0.0) > 0
            }
            print(f"round {round_} {case:9} {used / n * 1e6:6.1f} µs/call  by thread {threads}")
    server.audit = audit
    loop.run_until_complete(services.stop(stop_apps=True))
    loop.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--era", choices=["2025", "2026"], default="2025")
    args = parser.parse_args()
    main(args.n, args.rounds, args.era)
