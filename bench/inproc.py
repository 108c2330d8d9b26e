"""AppDeck's own per-request cost, without a server or a socket: the ASGI app called in a
loop with a prepared scope. Separates our code's cost from uvicorn's in ``run.py``'s figures.

    .venv/bin/python bench/inproc.py [--profile] [--tracing off|noop|otlp] [--ratio R]

``--tracing``: ``off`` (the default: no endpoint, no tracer); ``noop``: every request traced
(100 % sampling) through a ``BatchSpanProcessor`` into an exporter that drops the spans;
``otlp``: the same into the OTLP/HTTP exporter, posting to a receiver in a process of its own
(its decoding is not this process's CPU; the exporter's encoding, in the processor's thread,
is). ``--ratio``: the share of traces sampled (default 1: every one).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from appdeck.app import Services
from appdeck.auth import scopes
from appdeck.auth.admin import IdentityAdmin
from appdeck.observability.tracing import Tracing
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from appdeck.tuning import tune_gc

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


async def echo(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": arguments["text"]}]}


SINK = Path(__file__).with_name("otlp_sink.py")
"""The OTLP receiver the ``otlp`` mode exports to (in a process of its own)."""


def tracing_for(
    mode: str, ratio: float = 1.0
) -> tuple[Tracing | None, subprocess.Popen[str] | None]:
    """The tracing ``--tracing`` asks for, and the receiver process it started (if any)."""
    if mode == "off":
        return None, None
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider, sampling
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    receiver = None
    exporter: SpanExporter = Dropped()
    if mode == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        receiver = subprocess.Popen([sys.executable, str(SINK)], stdout=subprocess.PIPE, text=True)
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
    provider = TracerProvider(sampler=sampling.ParentBased(sampling.TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider), receiver


async def main(n: int, profile: bool, mode: str = "off", ratio: float = 1.0) -> None:
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[name]
    tracing, receiver = tracing_for(mode, ratio)
    data_dir = Path(tempfile.mkdtemp())
    settings = Settings.model_validate(
        {
            "data_dir": data_dir,
            "rate_limit_per_second": 1e9,
            "rate_limit_burst": 10**9,
            "ingress_port": 0,  # a free port: 8088 may be a running server's
        }
    )
    services = await Services.start(settings, port=8080, tracing=tracing)
    tune_gc()  # as appdeck serve does
    services.registry.add_tool(ToolDef("echo", "Echo", ECHO_SCHEMA, echo))
    admin = IdentityAdmin(services.identities, services.token_issuer)
    await admin.ensure_dev()
    token, _ = await admin.mint_access_token("dev", "dev", scopes.render(set(scopes.ALL)))
    app = services.asgi()

    def scope(extra: list[tuple[bytes, bytes]]) -> dict[str, Any]:
        return {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": [
                (b"host", b"127.0.0.1:8080"),
                (b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream"),
                (b"authorization", f"Bearer {token}".encode()),
                *extra,
            ],
        }

    async def call(body: bytes, extra: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope(extra), receive, send)
        return sent

    init = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
        }
    )
    out = await call(init, [])
    sid = dict(out[0]["headers"])[b"mcp-session-id"]
    extra = [(b"mcp-session-id", sid), (b"mcp-protocol-version", b"2025-11-25")]
    bodies = {
        "tools/call": orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "hello"}},
            }
        ),
        "tools/list": orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    }
    for name, body in bodies.items():
        result = await call(body, extra)
        assert b'"result"' in result[-1]["body"], result
        for _ in range(1000):
            await call(body, extra)
        prof = cProfile.Profile() if profile else None
        start = time.perf_counter()
        cpu = time.process_time()  # every thread's (the span processor's too)
        if prof:
            prof.enable()
        for _ in range(n):
            await call(body, extra)
        if prof:
            prof.disable()
        elapsed = time.perf_counter() - start
        used = time.process_time() - cpu
        print(
            f"{name:12s} {elapsed / n * 1e6:7.1f} µs per request, {used / n * 1e6:7.1f} µs CPU "
            f"(in-process, no socket; tracing {mode}"
            + (f", sampled {ratio:g}" if mode != "off" else "")
            + ")"
        )
        if prof:
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    await services.stop(stop_apps=True)  # HAProxy too: it outlives a plain stop
    if receiver is not None:
        receiver.terminate()
        receiver.wait(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tracing", choices=["off", "noop", "otlp"], default="off")
    parser.add_argument("--ratio", type=float, default=1.0)
    args = parser.parse_args()
    import uvloop

    uvloop.run(main(args.n, args.profile, args.tracing, args.ratio))
