"""Traces (``appdeck.observability.tracing``): off by default; with a provider of the test's
own (in-memory exporter), a deploy run as a task through the MCP endpoint is one trace from
``tools/call deploy_app`` down to each phase, continuing the client's ``traceparent``; runs
that fail say why, bounded; rollbacks and restarts are traced alike."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from appdeck.app import Services
from appdeck.assembly import deploy_watcher
from appdeck.auth import scopes
from appdeck.auth.admin import IdentityAdmin
from appdeck.observability.deploys import DeployMetrics
from appdeck.observability.tracing import ENDPOINT_VARIABLES, MAX_DETAIL, Tracing, tracing_of
from appdeck.settings import Settings
from appdeck.storage import Storage
from tests.support.mcp import headers, initialize, request
from tests.support.wait import until

from .rig import watched_rig

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture(autouse=True)
def _no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's own OTEL_* settings stay out of these tests."""
    for name in (
        *ENDPOINT_VARIABLES,
        "OTEL_SERVICE_NAME",
        "OTEL_TRACES_SAMPLER",
        "OTEL_SDK_DISABLED",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def exported() -> Iterator[tuple[Tracing, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    try:
        yield tracing, exporter
    finally:
        tracing.shutdown()


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = named(spans, name)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def ids(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


# -- off by default, the standard variables ---------------------------------------------------


async def test_tracing_is_off_without_an_endpoint(tmp_path: Path) -> None:
    assert tracing_of(None) is None
    assert isinstance(deploy_watcher(None), DeployMetrics)
    settings = Settings.model_validate(
        {"data_dir": tmp_path / "data", "source_roots": [tmp_path / "src"]}
    )
    services = await Services.start(settings)
    try:
        assert services.tracing is None
        assert services.server.tracing is None
        assert isinstance(services.platform.deploys.watcher, DeployMetrics)  # type: ignore[union-attr]
    finally:
        await services.stop(stop_apps=True)
    # nor is a provider installed for the process
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)


def test_the_standard_variables_turn_it_on_and_are_read_by_the_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    tracing = tracing_of(None)
    assert tracing is not None
    try:
        assert tracing.provider.resource.attributes["service.name"] == "appdeck"  # our default
        assert tracing.provider.sampler is ALWAYS_OFF
    finally:
        tracing.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "deck-eu-1")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "false")
    tracing = tracing_of(None)
    assert tracing is not None
    try:
        assert tracing.provider.resource.attributes["service.name"] == "deck-eu-1"
    finally:
        tracing.shutdown()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing_of("http://127.0.0.1:9") is None


# -- one trace from tools/call deploy_app (a task) to every phase ----------------------------


@pytest.fixture
async def traced(
    tmp_path: Path, exported: tuple[Tracing, InMemorySpanExporter]
) -> AsyncIterator[tuple[httpx.AsyncClient, str, Path]]:
    source = tmp_path / "src" / "hello"
    shutil.copytree(HELLO, source)
    settings = Settings.model_validate(
        {
            "data_dir": tmp_path / "data",
            "source_roots": [tmp_path / "src"],
            "rate_limit_per_second": 0,
        }
    )
    services = await Services.start(settings, tracing=exported[0])
    admin = IdentityAdmin(services.identities, services.token_issuer)
    await admin.create_tenant("acme")
    await admin.create_user("acme", "alice", None, role="admin")
    token, _ = await admin.mint_access_token("acme", "alice", scopes.render(set(scopes.ALL)))
    transport = httpx.ASGITransport(app=services.asgi())
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url=services.base_url, timeout=90
        ) as client:
            client.headers["authorization"] = f"Bearer {token}"
            yield client, await initialize(client, token), source
    finally:
        await services.stop(stop_apps=True)


async def call(
    client: httpx.AsyncClient, session: str, params: dict[str, object], id: int
) -> dict[str, object]:
    r = await client.post("/mcp", json=request("tools/call", params, id), headers=headers(session))
    return dict(r.json())


async def test_a_deploy_run_as_a_task_is_one_trace_continuing_the_clients(
    traced: tuple[httpx.AsyncClient, str, Path],
    exported: tuple[Tracing, InMemorySpanExporter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, session, source = traced
    exporter = exported[1]
    spec = {"source_path": str(source), "run_command": "python3 app.py", "instances": 2}
    spec["health_check"] = {"path": "/healthz"}
    registered = await call(
        client, session, {"name": "register_app", "arguments": {"name": "hello", "spec": spec}}, 1
    )
    app_id = registered["result"]["structuredContent"]["app_id"]  # type: ignore[index]
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    created = await call(
        client,
        session,
        {
            "name": "deploy_app",
            "arguments": {"app_id": app_id, "strategy": "rolling", "task": {"ttl": 60000}},
            "_meta": {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "k=v"},
        },
        2,
    )
    task = created["result"]["task"]  # type: ignore[index]
    async with asyncio.timeout(60):
        r = await client.post(
            "/mcp",
            json=request("tasks/result", {"taskId": task["taskId"]}, 3),
            headers=headers(session),
        )
    assert r.json()["result"]["structuredContent"]["state"] == "live", r.json()
    await until(lambda: named(exporter.get_finished_spans(), "deploy"), within=10)
    spans = exporter.get_finished_spans()

    server = one(spans, "tools/call deploy_app")
    trace_id, server_id = ids(server)
    assert f"{trace_id:032x}" == CLIENT_TRACE  # the client's trace, continued
    assert f"{parent_of(server):016x}" == CLIENT_SPAN
    assert server.kind == SpanKind.SERVER
    assert server.attributes is not None
    assert server.attributes["mcp.method.name"] == "tools/call"
    assert server.attributes["gen_ai.tool.name"] == "deploy_app"
    assert server.attributes["mcp.session.id"] == session
    assert server.status.status_code == StatusCode.UNSET

    lease = one(spans, "deploy.lease")
    run = one(spans, "deploy")
    assert parent_of(lease) == server_id
    assert parent_of(run) == server_id  # the task carried the request's context
    assert run.attributes is not None
    assert run.attributes["appdeck.app.id"] == app_id
    assert run.attributes["appdeck.deployment.number"] == 1
    assert run.attributes["appdeck.deploy.strategy"] == "rolling"
    assert run.attributes["appdeck.deploy.outcome"] == "live"
    assert lease.start_time is not None
    assert run.start_time is not None
    assert lease.start_time < run.start_time

    run_id = ids(run)[1]
    phases = sorted((s for s in spans if parent_of(s) == run_id), key=lambda s: s.start_time or 0)
    assert all(ids(s)[0] == trace_id for s in phases)
    assert [s.name for s in phases] == [
        "deploy.build",
        "deploy.start",
        "deploy.health",
        "deploy.shift",
        "deploy.start",
        "deploy.health",
        "deploy.shift",
        "deploy.shift",  # all traffic on the new release
    ]
    instances = [(s.attributes or {}).get("appdeck.instance.index") for s in phases]
    assert instances == [None, 0, 0, None, 1, 1, None, None]
    assert [(s.attributes or {}).get("appdeck.traffic.percent") for s in phases][-1] == 100

    lines = [
        r.activity
        for r in caplog.records
        if r.name == "appdeck.activity" and getattr(r, "activity", {}).get("tool") == "deploy_app"
    ]
    assert len(lines) == 1
    assert lines[0]["trace_id"] == CLIENT_TRACE  # the activity line names the trace
    assert lines[0]["span_id"] == f"{server_id:016x}"


async def test_a_traceparent_that_is_not_one_starts_a_new_trace(
    traced: tuple[httpx.AsyncClient, str, Path],
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    client, session, _ = traced
    bad: list[object] = [12, {"a": 1}, "00-" + "z" * 32 + "-" + "0" * 16 + "-01", "x" * 10_000]
    for n, value in enumerate(bad):
        reply = await call(
            client,
            session,
            {"name": "list_my_apps", "arguments": {}, "_meta": {"traceparent": value}},
            n + 10,
        )
        assert "result" in reply, reply
    spans = named(exported[1].get_finished_spans(), "tools/call list_my_apps")
    assert len(spans) == len(bad)
    assert all(s.parent is None for s in spans)
    made_up = await call(client, session, {"name": "no_such_tool_" + "x" * 300}, 99)
    assert "error" in made_up or made_up["result"]["isError"]  # type: ignore[index]
    other = one(exported[1].get_finished_spans(), "tools/call other")  # never the client's name
    assert other.status.status_code == StatusCode.ERROR
    assert len(other.status.description or "") <= MAX_DETAIL


# -- failures, rollbacks and restarts, on the in-memory runtime -------------------------------


async def test_a_failed_build_marks_the_build_and_the_run_as_errors_with_bounded_messages(
    storage: Storage, tmp_path: Path, exported: tuple[Tracing, InMemorySpanExporter]
) -> None:
    tracing, exporter = exported
    rig = await watched_rig(storage, tmp_path, tracing.deploys())
    await rig.spec(build_command="false")
    assert await rig.deploy() == "failed"
    spans = exporter.get_finished_spans()
    run, build = one(spans, "deploy"), one(spans, "deploy.build")
    assert parent_of(build) == ids(run)[1]
    assert build.status.status_code == StatusCode.ERROR
    assert "exited with status 1" in (build.status.description or "")
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes is not None
    assert run.attributes["appdeck.deploy.outcome"] == "failed"
    assert not build.events
    assert not run.events


async def test_an_unhealthy_instance_says_what_it_saw_cut_to_the_bound(
    storage: Storage, tmp_path: Path, exported: tuple[Tracing, InMemorySpanExporter]
) -> None:
    tracing, exporter = exported
    rig = await watched_rig(storage, tmp_path, tracing.deploys())
    rig.runtime.health_plan[:] = [False]

    def noisy(release: object) -> str:
        return "the app printed " + "A" * 5000  # an app's output: attacker text

    rig.runtime.why = noisy  # type: ignore[method-assign,assignment]
    assert await rig.deploy() == "failed"
    health = one(exporter.get_finished_spans(), "deploy.health")
    assert health.status.status_code == StatusCode.ERROR
    assert len(health.status.description or "") <= MAX_DETAIL


async def test_a_rejected_canary_rollback_and_restart_are_traced_as_their_own_runs(
    storage: Storage, tmp_path: Path, exported: tuple[Tracing, InMemorySpanExporter]
) -> None:
    tracing, exporter = exported
    rig = await watched_rig(storage, tmp_path, tracing.deploys())
    assert await rig.deploy() == "live"
    rig.router.error_rates[f"{rig.app_id}-2"] = 0.5
    assert await rig.deploy("canary") == "rolled_back"
    canary = next(
        s
        for s in named(exporter.get_finished_spans(), "deploy")
        if s.attributes and s.attributes["appdeck.deployment.number"] == 2
    )
    assert canary.attributes is not None
    assert canary.attributes["appdeck.deploy.outcome"] == "rolled_back"
    assert [e.name for e in canary.events] == ["canary rejected"]
    assert canary.events[0].attributes == {"appdeck.canary.reason": "error_rate"}
    analysis = named(exporter.get_finished_spans(), "deploy.analysis")
    assert len(analysis) == 1
    assert analysis[0].status.status_code == StatusCode.ERROR

    assert await rig.deploy("blue_green") == "live"
    exporter.clear()
    await rig.deploys.rollback(await rig.app())
    spans = exporter.get_finished_spans()
    rollback = one(spans, "rollback")
    assert rollback.attributes is not None
    assert rollback.attributes["appdeck.deploy.outcome"] == "live"
    assert rollback.attributes["appdeck.deployment.number"] == 1
    assert parent_of(one(spans, "deploy.shift")) == ids(rollback)[1]
    assert one(spans, "deploy.lease").parent is None  # no request here: a root of its own

    exporter.clear()
    await rig.deploys.restart(await rig.app())
    spans = exporter.get_finished_spans()
    restart = one(spans, "restart")
    children = [s.name for s in spans if parent_of(s) == ids(restart)[1]]
    assert children.count("deploy.start") == 3  # the spare, then each of the two
    assert children.count("deploy.health") == 3
