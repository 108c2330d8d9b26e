"""Fallback load generator when ``wrk`` is unavailable: raw HTTP/1.1 keep-alive on uvloop.

Closed loop like wrk: ``--connections`` connections, each sends the next request as soon as
the previous answer is read. Prints one ``BENCHJSON {...}`` line in the same format as the
wrk Lua script in ``run.py``. Slower than wrk (one Python process); see the README.

    python bench/pyload.py --port 18766 --session SID --body '{"jsonrpc":"2.0","id":%d,...}'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One HTTP/1.1 request on a keep-alive connection: (status, headers, body)."""
    writer.write(head + b"content-length: %d\r\n\r\n" % len(body) + body)
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("connection closed")
    headers: dict[bytes, bytes] = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get(b"content-length", b"0"))
    payload = await reader.readexactly(length) if length else b""
    return int(status_line.split()[1]), headers, payload


def request_head(host: str, port: int, session: str | None, token: str | None = None) -> bytes:
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: {host}:{port}\r\n"
        "content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
    )
    if token:
        head += f"authorization: Bearer {token}\r\n"
    if session is not None:
        head += f"mcp-protocol-version: 2025-11-25\r\nmcp-session-id: {session}\r\n"
    return head.encode()


async def worker(
    host: str,
    port: int,
    head: bytes,
    body_fmt: str,
    ids: list[int],
    deadline: float,
    lat: list[float],
    counts: dict[str, int],
) -> None:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        counts["connect"] += 1
        return
    try:
        while time.perf_counter() < deadline:
            ids[0] += 1
            body = (body_fmt % ids[0]).encode()
            t0 = time.perf_counter()
            status, _, payload = await exchange(reader, writer, head, body)
            lat.append((time.perf_counter() - t0) * 1e6)
            if status >= 400:
                counts["status"] += 1
            if status != 200 or b'"result"' not in payload or b'"isError":true' in payload:
                counts["bad"] += 1
    except (OSError, asyncio.IncompleteReadError):
        counts["read"] += 1
    finally:
        writer.close()


async def initialize_many(
    host: str, port: int, count: int, concurrency: int, body: bytes, token: str | None = None
) -> tuple[int, list[str]]:
    """POST ``body`` (an initialize request) ``count`` times over ``concurrency`` keep-alive
    connections. Returns (answers that were 200 with an Mcp-Session-Id, failure texts)."""
    head = request_head(host, port, None, token)
    remaining = iter(range(count))
    created = 0
    failures: list[str] = []

    async def one_connection() -> None:
        nonlocal created
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for _ in remaining:
                try:
                    status, headers, payload = await exchange(reader, writer, head, body)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                    continue
                if status == 200 and headers.get(b"mcp-session-id"):
                    created += 1
                else:
                    failures.append(f"HTTP {status}: {payload[:200].decode(errors='replace')}")
        finally:
            writer.close()

    await asyncio.gather(*(one_connection() for _ in range(min(count, concurrency))))
    return created, failures


async def run(args: argparse.Namespace) -> dict[str, float]:
    head = request_head(args.host, args.port, args.session, args.token)
    lat: list[float] = []
    counts = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0, "bad": 0}
    ids = [args.id_base]
    start = time.perf_counter()
    deadline = start + args.seconds
    await asyncio.gather(
        *(
            worker(args.host, args.port, head, args.body, ids, deadline, lat, counts)
            for _ in range(args.connections)
        )
    )
    duration = time.perf_counter() - start
    lat.sort()
    return {
        "requests": len(lat),
        "duration_us": duration * 1e6,
        **counts,
        "p50_us": percentile(lat, 50),
        "p90_us": percentile(lat, 90),
        "p99_us": percentile(lat, 99),
        "max_us": lat[-1] if lat else 0.0,
        "mean_us": sum(lat) / len(lat) if lat else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--session", required=True)
    parser.add_argument("--token", default=None, help="bearer token (Authorization header)")
    parser.add_argument("--body", required=True, help="JSON-RPC body with %%d for the id")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--id-base", type=int, default=0)
    args = parser.parse_args()
    try:
        import uvloop

        result = uvloop.run(run(args))
    except ImportError:
        result = asyncio.run(run(args))
    print("BENCHJSON " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
