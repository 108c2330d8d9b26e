"""OpenTelemetry traces: a span per MCP request, and a deploy's run and phases below it.

Off unless an OTLP endpoint is set: ``APPDECK_OTLP_ENDPOINT`` (AppDeck's setting, the base
URL: spans go to ``<it>/v1/traces``), else the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``. Off, :func:`tracing_of` returns None and nothing of
the SDK is built: the core and the engine see no tracer at all. On, one
:class:`~opentelemetry.sdk.trace.TracerProvider` (not the global one) exports through a
``BatchSpanProcessor`` over OTLP/HTTP; the SDK reads the standard variables itself
(``OTEL_SERVICE_NAME``, default ``appdeck`` here; ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER`` and its argument, ``OTEL_EXPORTER_OTLP_HEADERS`` and the other
exporter settings, ``OTEL_BSP_*``; ``OTEL_SDK_DISABLED=true`` turns it off).

The spans of one ``tools/call deploy_app`` (a task or not)::

    tools/call deploy_app            SERVER   mcp.method.name, gen_ai.tool.name, mcp.session.id
    ├── deploy.lease                          the app's lease taken
    └── deploy                                appdeck.app.id, appdeck.deployment.number, ...
        ├── deploy.build
        ├── deploy.start / deploy.health      per instance (appdeck.instance.index)
        ├── deploy.shift                      per route change (appdeck.traffic.percent)
        └── deploy.analysis                   per canary window

The request's span is current while the request is served, so a task the call creates (a
deploy run as a task) carries it on, as does the activity log line of the call
(:func:`appdeck.activity.follow_traces`). A ``traceparent`` in the request's ``_meta`` is
continued (W3C trace context only: the client's baggage is not taken).

Bounded: method and tool names are ones the server serves (else ``other``); error messages
(which may quote an app's output) are cut to :data:`MAX_DETAIL` characters; no exception is
recorded (its text and stack would carry unbounded data); no app name or tenant is an
attribute (the app's id is).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from appdeck import __version__, activity
from appdeck.platform.deploy.watch import (
    Kind,
    Outcome,
    Phase,
    Reason,
    implied_outcome,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

OTHER: Final = "other"
MAX_DETAIL: Final = 200
SERVICE_NAME: Final = "appdeck"
ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_PROPAGATOR: Final = TraceContextTextMapPropagator()
_OK_OUTCOMES: Final = frozenset({"ok", "task", "input_required", "cancelled"})


def tracing_of(endpoint: str | None) -> Tracing | None:
    """Traces to ``endpoint`` (AppDeck's setting) or to the standard variables' endpoint;
    None (off) when neither is set, or ``OTEL_SDK_DISABLED`` is true."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if not endpoint and not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = (
        OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
        if endpoint
        else OTLPSpanExporter()  # the OTEL_EXPORTER_OTLP_* variables
    )
    provider = TracerProvider(resource=_resource())  # the sampler: OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider)


def _resource() -> Resource:
    from opentelemetry.sdk.resources import Resource

    found = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    name = found.attributes.get("service.name")
    if isinstance(name, str) and not name.startswith("unknown_service"):
        return found
    return found.merge(Resource({"service.name": SERVICE_NAME}))


class Tracing:
    """AppDeck's tracer provider and the two things that trace through it: the MCP
    requests (:meth:`requests`, the core's port) and the deploy engine (:meth:`deploys`)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("appdeck", __version__)
        activity.follow_traces(current_ids)

    def requests(
        self, methods: Callable[[], Iterable[str]], tools: Callable[[], Iterable[str]]
    ) -> RequestTracer:
        return RequestTracer(self.tracer, methods, tools)

    def deploys(self) -> DeployTracer:
        return DeployTracer(self.tracer)

    def shutdown(self) -> None:
        """Export what is still queued (bounded by the processor's timeout) and stop."""
        activity.follow_traces(None)
        self.provider.shutdown()


def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids in hex (None outside a span)."""
    found = trace.get_current_span().get_span_context()
    if not found.is_valid:
        return None
    return format(found.trace_id, "032x"), format(found.span_id, "016x")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


class _Current:
    """A span made current for the length of a ``with`` block (ended with it)."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self._token: object | None = None

    def _attach(self) -> None:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))

    def _detach(self) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        self.span.end()


class RequestTracer:
    """The core's :class:`~appdeck.protocol.ports.Tracing`: a SERVER span per request,
    named and attributed as the OpenTelemetry MCP conventions say (``tools/call
    deploy_app``; ``mcp.method.name``, ``gen_ai.tool.name``, ``mcp.session.id``,
    ``error.type``)."""

    def __init__(
        self,
        tracer: Tracer,
        methods: Callable[[], Iterable[str]],
        tools: Callable[[], Iterable[str]],
    ) -> None:
        self._tracer = tracer
        self._methods = methods
        self._tools = tools
        self._known_methods: frozenset[str] | None = None
        self._known_tools: frozenset[str] | None = None

    def _method(self, method: str) -> str:
        known = self._known_methods
        if known is None:
            known = self._known_methods = frozenset(self._methods())
        return method if method in known else OTHER

    def _tool(self, tool: str) -> str:
        known = self._known_tools
        if known is None or tool not in known:  # tools are registered after start-up
            known = self._known_tools = frozenset(self._tools())
        return tool if tool in known else OTHER

    def request(
        self,
        method: str,
        tool: str | None,
        carrier: Mapping[str, str],
        session_id: str | None,
    ) -> _RequestSpan:
        name = self._method(method)
        attributes: dict[str, str] = {"mcp.method.name": name}
        if name == "tools/call":
            tool_name = self._tool(tool or "")
            name = f"tools/call {tool_name}"
            attributes["gen_ai.tool.name"] = tool_name
            attributes["gen_ai.operation.name"] = "execute_tool"
        if session_id is not None:
            attributes["mcp.session.id"] = session_id
        parent = _PROPAGATOR.extract(carrier) if carrier else None
        span = self._tracer.start_span(name, context=parent, kind=SpanKind.SERVER)
        if span.is_recording():  # set after the start: given to start_span, the attributes
            span.set_attributes(attributes)  # cost twice as much (the sampler's copy)
        return _RequestSpan(span)


class _RequestSpan(_Current):
    def __enter__(self) -> _RequestSpan:
        self._attach()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        cancelled = isinstance(error, asyncio.CancelledError)  # not the request's fault
        if error is not None and not cancelled and self.span.is_recording():
            _failed(self.span, error)
        self._detach()

    def answered(self, outcome: str, error: str | None) -> None:
        if outcome in _OK_OUTCOMES or not self.span.is_recording():
            return
        self.span.set_attribute("error.type", outcome)
        self.span.set_status(Status(StatusCode.ERROR, _cut(error or outcome)))


def _failed(span: Span, error: BaseException) -> None:
    """An exception left the span: ERROR with its (cut) message, never its stack."""
    span.set_attribute("error.type", type(error).__name__)
    span.set_status(Status(StatusCode.ERROR, _cut(str(error) or type(error).__name__)))


class DeployTracer:
    """The deploy engine's :class:`~appdeck.platform.deploy.watch.DeployWatcher` for
    traces: a span per run, a child span per phase."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def watch(self, kind: Kind, app_id: int, number: int, strategy: str) -> _RunSpan:
        span = self._tracer.start_span(
            kind,
            attributes={
                "appdeck.deploy.kind": kind,
                "appdeck.app.id": app_id,
                "appdeck.deployment.number": number,
                "appdeck.deploy.strategy": strategy,
            },
        )
        return _RunSpan(self._tracer, span)

    def lease(self) -> contextlib.AbstractContextManager[None]:
        return _phase(self._tracer, "lease", {})


@contextlib.contextmanager
def _phase(tracer: Tracer, name: Phase, attributes: dict[str, int]) -> Iterator[None]:
    with tracer.start_as_current_span(
        f"deploy.{name}",
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except BaseException as error:
            quiet = isinstance(error, GeneratorExit | asyncio.CancelledError)
            if not quiet and span.is_recording():
                _failed(span, error)
            raise


class _RunSpan(_Current):
    def __init__(self, tracer: Tracer, span: Span) -> None:
        super().__init__(span)
        self._tracer = tracer
        self._outcome: Outcome | None = None

    def __enter__(self) -> _RunSpan:
        self._attach()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._outcome is None:
            self._outcome = implied_outcome(error)
            self.span.set_attribute("appdeck.deploy.outcome", self._outcome)
            if self._outcome == "failed" and error is not None:
                _failed(self.span, error)
        self._detach()

    def phase(
        self, name: Phase, *, instance: int | None = None, traffic: int | None = None
    ) -> contextlib.AbstractContextManager[None]:
        attributes: dict[str, int] = {}
        if instance is not None:
            attributes["appdeck.instance.index"] = instance
        if traffic is not None:
            attributes["appdeck.traffic.percent"] = traffic
        return _phase(self._tracer, name, attributes)

    def rejected(self, reason: Reason) -> None:
        self.span.add_event("canary rejected", {"appdeck.canary.reason": reason})

    def ended(self, outcome: Outcome, detail: str = "") -> None:
        if self._outcome is not None:
            return
        self._outcome = outcome
        self.span.set_attribute("appdeck.deploy.outcome", outcome)
        if outcome in ("failed", "rolled_back"):
            self.span.set_status(Status(StatusCode.ERROR, _cut(detail or outcome)))
