"""Issue 23's "must show" for traces: a real ``appdeck serve`` with ``APPDECK_OTLP_ENDPOINT``
set exports over OTLP/HTTP to a receiver this test runs (``http.server`` on loopback, each
``/v1/traces`` body decoded with ``opentelemetry.proto``). The official client deploys the
hello app as a task, its ``_meta`` carrying a ``traceparent``: the receiver gets one trace
from ``tools/call deploy_app`` through the lease, the run, the build, each instance's start
and health check and each route change, in order, with their parent links; the spans still queued when the
server stops are flushed by its stop."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import mcp.types as types
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import hello_source, official_client, task_result
from tests.support.wait import until

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: keeps every span posted to ``/v1/traces``."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[Span] = []
        self.services: set[str] = set()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        export = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            for resource_spans in export.resource_spans:
                for attribute in resource_spans.resource.attributes:
                    if attribute.key == "service.name":
                        self.server.services.add(attribute.value.string_value)
                for scope in resource_spans.scope_spans:
                    self.server.spans.extend(scope.spans)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


@pytest.mark.e2e
async def test_a_deploys_trace_reaches_an_otlp_receiver_with_every_phase_in_order(
    launch_appdeck: Launcher, tmp_path: Path, receiver: Receiver
) -> None:
    source, env = hello_source(tmp_path)
    # a batch every minute: what the receiver gets, the server's stop flushed
    env |= {"APPDECK_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "60000"}
    server = await launch_appdeck(env=env)
    spec = {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "instances": 2,
    }
    async with asyncio.timeout(90), official_client(server) as client:
        made = await client.call_tool("register_app", {"name": "hello", "spec": spec})
        assert not made.is_error, made
        app_id = made.structured_content["app_id"]  # type: ignore[index]
        raw = await client.session._dispatcher.send_raw_request(
            "tools/call",
            {
                "name": "deploy_app",
                "arguments": {"app_id": app_id, "strategy": "rolling"},
                "task": {"ttl": 60_000},
                "_meta": {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"},
            },
            {"headers": {"mcp-protocol-version": client.protocol_version}, "timeout": 10},
        )
        task = types.CreateTaskResult.model_validate(raw, by_name=False).task
        done = await task_result(client, task.task_id, read_timeout=60)
        assert done.structured_content is not None
        assert done.structured_content["state"] == "live", done

    assert receiver.named("deploy") == []  # not yet: the batch is held
    assert await server.stop() == 0  # SIGTERM: Services.stop shuts the provider down
    await until(lambda: receiver.named("deploy"), within=10)
    assert receiver.services == {"appdeck"}

    call = receiver.named("tools/call deploy_app")
    assert len(call) == 1
    server_span = call[0]
    assert server_span.trace_id.hex() == CLIENT_TRACE
    assert server_span.parent_span_id.hex() == CLIENT_SPAN
    assert server_span.kind == Span.SPAN_KIND_SERVER
    attributes = {a.key: a.value.string_value for a in server_span.attributes}
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "deploy_app"
    assert attributes["mcp.session.id"]

    (run,) = receiver.named("deploy")
    (lease,) = receiver.named("deploy.lease")
    assert run.parent_span_id == server_span.span_id  # through the task
    assert lease.parent_span_id == server_span.span_id
    assert lease.start_time_unix_nano < run.start_time_unix_nano
    with receiver.lock:
        phases = sorted(
            (s for s in receiver.spans if s.parent_span_id == run.span_id),
            key=lambda s: s.start_time_unix_nano,
        )
    assert all(s.trace_id.hex() == CLIENT_TRACE for s in phases)
    assert [s.name for s in phases] == [
        "deploy.build",
        "deploy.start",
        "deploy.health",
        "deploy.shift",
        "deploy.start",
        "deploy.health",
        "deploy.shift",
        "deploy.shift",
    ]
    # each phase ends before the next begins, and all within the run
    for before, after in itertools.pairwise(phases):
        assert before.end_time_unix_nano <= after.start_time_unix_nano
    assert phases[-1].end_time_unix_nano <= run.end_time_unix_nano
