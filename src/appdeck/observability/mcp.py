"""The MCP endpoint's series: requests, tool calls, refusals, sessions, streams, replays, tasks.

    appdeck_mcp_requests_total{method,era,outcome}     every request answered by the core
    appdeck_mcp_tool_calls_total{tool,outcome}         every ``tools/call`` (a subset of the above)
    appdeck_mcp_tool_call_seconds{tool}                its latency, request in to answer out
    appdeck_mcp_refusals_total{reason}                 refused before any handler: unauthenticated,
                                                       rate_limited, auth_throttled
    appdeck_mcp_sessions_open                          handshake-era sessions this replica holds
    appdeck_mcp_streams_open{kind}                     SSE streams open now: post, get, listen
    appdeck_mcp_events_replayed_total                  events re-sent after ``Last-Event-ID``
    appdeck_mcp_task_updates_total{status}             task updates this replica wrote, by status
                                                       (a new status or a new status message:
                                                       each terminal status is counted once)

:class:`McpMetrics` is the protocol core's :class:`~appdeck.protocol.ports.Telemetry`. Label
The per-request series are plain dict counts made into metric families when scraped
(:class:`_Served`): counting a ``tools/call`` costs a few dict operations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Final

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from appdeck.observability.latency import Latency, counter, histogram
from appdeck.protocol.outcomes import OUTCOMES

OTHER: Final = "other"
"""The label of a method or tool the server does not serve (a client can send any name)."""

TOOL_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)


class _Served(Collector):
    """The per-request series, counted in plain dicts and turned into metric families only
    when scraped. prometheus-client's ``inc`` and ``observe`` take a lock each (0.5-0.7 µs
    here): three per ``tools/call`` cost 3.7 % of its throughput (bench/RESULTS.md). Every
    count happens on the event loop's thread, and so does the scrape, so no lock is needed."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str], int] = {}
        self.tool_calls: dict[tuple[str, str], int] = {}
        self.tool_seconds: dict[str, Latency] = {}

    def collect(self) -> Iterator[Metric]:
        yield counter(
            "appdeck_mcp_requests",
            "MCP requests answered, by method, protocol era (handshake or stateless) and outcome",
            ["method", "era", "outcome"],
            self.requests,
        )
        yield counter(
            "appdeck_mcp_tool_calls",
            "tools/call requests answered, by tool and outcome",
            ["tool", "outcome"],
            self.tool_calls,
        )
        yield histogram(
            "appdeck_mcp_tool_call_seconds",
            "tools/call latency from request in to answer out (a task: until it is created)",
            ["tool"],
            self.tool_seconds,
        )


SERVED: Final = _Served()
REGISTRY.register(SERVED)

REFUSALS: Final = Counter(
    "appdeck_mcp_refusals",
    "Requests refused before any handler ran, by reason",
    ["reason"],
)
REFUSAL_REASONS: Final = ("unauthenticated", "rate_limited", "auth_throttled")
SESSIONS_OPEN: Final = Gauge(
    "appdeck_mcp_sessions_open", "Handshake-era MCP sessions held by this replica"
)
STREAMS_OPEN: Final = Gauge(
    "appdeck_mcp_streams_open", "SSE streams open on this replica, by kind", ["kind"]
)
STREAM_KINDS: Final = ("post", "get", "listen")
EVENTS_REPLAYED: Final = Counter(
    "appdeck_mcp_events_replayed",
    "Stream events sent again to a client resuming with Last-Event-ID",
)
TASK_UPDATES: Final = Counter(
    "appdeck_mcp_task_updates",
    "Task updates written by this replica (a new status or status message), by status",
    ["status"],
)
TASK_STATUSES: Final = ("working", "input_required", "completed", "failed", "cancelled")

for _reason in REFUSAL_REASONS:  # every series exists at 0 from the start: rate() needs it
    REFUSALS.labels(_reason)
for _kind in STREAM_KINDS:
    STREAMS_OPEN.labels(_kind)
for _status in TASK_STATUSES:
    TASK_UPDATES.labels(_status)


class McpMetrics:
    """The protocol core's telemetry (:class:`~appdeck.protocol.ports.Telemetry`), bounded
    to the methods and tools the server serves."""

    def __init__(
        self, methods: Callable[[], Iterable[str]], tools: Callable[[], Iterable[str]]
    ) -> None:
        self._served = methods
        self._methods: frozenset[str] | None = None
        self._tools = tools
        """The registered tool names, read when a tool is first seen (tools are registered
        at start-up, after this object exists)."""
        self._known_tools: frozenset[str] | None = None

    def request_served(self, method: str, era: str, outcome: str) -> None:
        methods = self._methods
        if methods is None:
            methods = self._methods = frozenset(self._served())
        key = (method if method in methods else OTHER, era, _outcome(outcome))
        requests = SERVED.requests  # keyed on labels only: a client's names stay out
        requests[key] = requests.get(key, 0) + 1

    def tool_served(self, tool: str, outcome: str, seconds: float) -> None:
        known = self._known_tools
        if known is None or tool not in known:
            known = self._known_tools = frozenset(self._tools())
        name = tool if tool in known else OTHER
        key = (name, _outcome(outcome))
        calls = SERVED.tool_calls
        calls[key] = calls.get(key, 0) + 1
        latency = SERVED.tool_seconds.get(name)
        if latency is None:
            latency = SERVED.tool_seconds[name] = Latency(TOOL_BUCKETS)
        latency.observe(seconds)

    def task_changed(self, status: str) -> None:
        TASK_UPDATES.labels(status if status in TASK_STATUSES else OTHER).inc()


_KNOWN_OUTCOMES: Final = frozenset(OUTCOMES)


def _outcome(word: str) -> str:
    return word if word in _KNOWN_OUTCOMES else OTHER


def refused(reason: str) -> None:
    """A request refused before the core saw it (see :data:`REFUSAL_REASONS`)."""
    REFUSALS.labels(reason if reason in REFUSAL_REASONS else OTHER).inc()


def count_sessions(live: Callable[[], int]) -> None:
    """Read the open-session gauge from ``live`` at each scrape (the last server started
    in this process wins: one per process in production)."""
    SESSIONS_OPEN.set_function(live)


def stream_opened(kind: str) -> None:
    """An SSE response started (``kind``: post, get or listen); pair with :func:`stream_closed`."""
    STREAMS_OPEN.labels(kind).inc()


def stream_closed(kind: str) -> None:
    STREAMS_OPEN.labels(kind).dec()


def replayed(events: int) -> None:
    """``events`` stream events sent again to a client that resumed with Last-Event-ID."""
    EVENTS_REPLAYED.inc(events)
