"""HAProxy's configuration, rendered from the route table.

One frontend on the ingress port; one backend ``be_<key>`` per route with a live release,
one server ``<release>-<n>`` per instance. The frontend:

1. answers 400 when there is no ``Host``; drops every ``X-Forwarded-*``/``Forwarded`` the
   client sent (HAProxy sets its own; ``Host`` is kept as sent);
2. sets ``txn.route`` to the route key the host names (``<key>.localhost`` or
   ``<key>.<extra domain>``);
3. **edge rules** (:data:`EDGE_RULES_MARK`): the edge helper's lines go here and may set
   ``txn.route`` (a custom domain) before anything reads it;
4. looks the route's state up in ``states.map`` (``live``, ``stopped``, ``not_deployed``,
   ``no_live_release``) and answers the Python ingress's error pages (:mod:`..pages`,
   JSON or HTML by ``Accept``) for every state but ``live``, and 413 above the body limit;
5. ``use_backend be_%[var(txn.route)]``.

The 502/504 HAProxy makes when no instance answers come from ``http-error`` pages looked up
in ``e502.map``/``e504.map`` (one per route and format, naming the app); HAProxy says 503
when it could not connect, turned into the ingress's 502 by a marker header.

Values reaching the config come from the route table, which validated them (route keys are
``[a-z0-9-]``, release ids ``[A-Za-z0-9._:-]``, upstreams ``[<ns>@]127.0.0.1:<port>``):
nothing from a client is written here.
"""

from __future__ import annotations

import functools
import hashlib
import re
import resource
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.pages import error_page
from appdeck.ingress.routes import Backend, RouteTable

BODY_LUA = "body.lua"
BODY_FILTER = "appdeck_body_limit"
"""The Lua filter (``body.lua``) that limits a body of unannounced size."""
EDGE_RULES_MARK = "# --- edge rules (custom domains, API keys, challenges) ---"
MAX_SERVER_WEIGHT = 256
_ROUTE = "@ROUTE@"
_WEIGHT = re.compile(r" weight [0-9]+")
_NO_HOST = "!{ req.hdr(host) -m found }"
_NO_ROUTE = "!{ var(txn.route),length gt 0 }"
_EDGE_ROUTE = "{ var(txn.route) -m beg _ }"
_HTML = '"text/html; charset=utf-8"'


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one data plane keeps its files (``/run/appdeck/<install>/haproxy``)."""

    directory: Path

    @property
    def config(self) -> Path:
        return self.directory / "haproxy.cfg"

    @property
    def pid(self) -> Path:
        return self.directory / "haproxy.pid"

    @property
    def master(self) -> Path:
        return self.directory / "master.sock"

    @property
    def stats(self) -> Path:
        return self.directory / "stats.sock"

    @property
    def lock(self) -> Path:
        return self.directory / "lock"

    @property
    def lease(self) -> Path:
        """The data plane's lease (``ingress/haproxy/lease.py``)."""
        return self.directory / "lease"

    @property
    def handoff(self) -> Path:
        """The listener through which a stopping worker hands requests to the current one."""
        return self.directory / "handoff.sock"

    def file(self, name: str) -> Path:
        return self.directory / name


@dataclass(frozen=True, slots=True)
class Rendered:
    """A whole configuration: the config text, the map files beside it, and each server's
    weight (the part the runtime API changes without a reload)."""

    config: str
    files: dict[str, str]
    weights: dict[tuple[str, str], int]
    """(backend, server) -> weight."""
    servers: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """(backend, server) -> (route key, release id): how stats are summed per release."""
    marker: str = ""
    """The ``description`` the config gives HAProxy: ``show info`` of the worker running
    it says so (how a reload is confirmed)."""

    @property
    def skeleton(self) -> str:
        """Everything but the weights: when it changes, HAProxy must reload."""
        text = _WEIGHT.sub("", self.config)
        for name in sorted(self.files):
            text += f"\n--- {name}\n{self.files[name]}"
        return text

    @property
    def digest(self) -> str:
        """The skeleton's hash, written into the config's ``description`` so that the
        running worker's ``show info`` tells which config it runs."""
        return hashlib.sha256(self.skeleton.encode()).hexdigest()[:16]

    def fits_in(self, running: Rendered) -> bool:
        """Whether HAProxy running ``running`` can serve this config by weights alone: all
        but the route servers is the same, and each of this config's servers is one of
        ``running``'s (a server it lacks stays there at weight 0 until the next reload)."""
        mine, theirs = _frame(self), _frame(running)
        return mine[0] == theirs[0] and mine[1] <= theirs[1]


def _frame(rendered: Rendered) -> tuple[str, frozenset[tuple[str, str]]]:
    """The skeleton without the route servers (its description line neither: it hashes
    them), and those servers as (section, server line) pairs."""
    return _frame_of(rendered.config, tuple(sorted(rendered.files.items())))


@functools.lru_cache(maxsize=8)
def _frame_of(
    config: str, files: tuple[tuple[str, str], ...]
) -> tuple[str, frozenset[tuple[str, str]]]:
    """:func:`_frame`, kept for the configs last asked about (the running one is compared
    with every sync's: its frame is worked out once, not at each route change)."""
    kept: list[str] = []
    servers: set[tuple[str, str]] = set()
    section = ""
    skeleton = _WEIGHT.sub("", config) + "".join(f"\n--- {n}\n{text}" for n, text in files)
    for line in skeleton.split("\n"):
        if line and not line.startswith(" "):
            section = line
        if line.startswith("    server ") and not line.startswith(f"    server {HANDOFF_SERVER} "):
            servers.add((section, line))
        elif not line.startswith("    description appdeck-"):
            kept.append(line)
    return "\n".join(kept), frozenset(servers)


def _maxconn() -> int:
    """Connections HAProxy takes: two descriptors each, within this process's limit (which
    HAProxy inherits and cannot raise)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(256, min(20_000, (soft - 200) // 2))


def server_weights(backends: Sequence[Backend]) -> list[tuple[str, str, int]]:
    """(server name, address, weight) for each instance: a release's share is split evenly
    over its instances, scaled so the largest server weight is HAProxy's maximum (256)."""
    shares = [b.weight / len(b.upstreams) for b in backends if b.weight and b.upstreams]
    scale = MAX_SERVER_WEIGHT / max(shares) if shares else 0.0
    out = []
    for backend in backends:
        per = backend.weight / len(backend.upstreams) if backend.upstreams else 0.0
        weight = max(1, round(per * scale)) if backend.weight else 0
        for position, upstream in enumerate(backend.upstreams):
            out.append((server_name(backend.release_id, upstream, position), upstream, weight))
    return out


def server_name(release_id: str, upstream: str, position: int) -> str:
    """``<release>-<index>``: the instance's own index when the upstream names it (a
    sandboxed instance's ``<release>.<index>@…``), else its position in the release's list.
    So an instance keeps its server while others of its release leave the route (rolling),
    and HAProxy changes its weights without a reload."""
    key = upstream.rpartition("@")[0]
    index = key[len(release_id) + 1 :] if key.startswith(f"{release_id}.") else ""
    return f"{release_id}-{index if index.isdigit() else position}"


def state_of(table: RouteTable, route: str) -> str:
    """What the frontend does with a request for ``route`` (API keys: the edge's rules)."""
    backends = table.get(route) or []
    if table.stopped(route):
        return "stopped"
    if any(b.weight for b in backends):
        return "live"
    return "no_live_release" if table.has_served(route) else "not_deployed"


@functools.lru_cache(maxsize=4096)
def _page(status: int, code: str, message: str, fmt: str, **details: str | int) -> str:
    """One error page as a config line holds it (kept: a route's pages are rendered at
    every route change, and the same ones each time)."""
    accept = b"application/json" if fmt == "json" else b"text/html"
    _, body = error_page(status, code, message, accept, **details)
    text = body.decode().strip("\n")
    if "'" in text or "\n" in text:
        raise ValueError("an error page must be one line without a single quote")
    return text


def _lf(text: str) -> str:
    """A page as an HAProxy log-format string, the route key filled in at request time."""
    return text.replace("%", "%%").replace(_ROUTE, "%[var(txn.route)]")


@functools.lru_cache(maxsize=64)
def _returns(status: int, code: str, message: str, cond: str, headers: str = "") -> tuple[str, ...]:
    lines = []
    for fmt, ctype in (("json", "application/json"), ("html", _HTML)):
        details = {"app": _ROUTE} if _ROUTE in message else {}
        page = _lf(_page(status, code, message, fmt, **details))
        lines.append(
            f"http-request return status {status} content-type {ctype} "
            f"hdr cache-control no-store{headers} "  # as error_page: never cached
            f"lf-string '{page}' if {{ var(txn.fmt) -m str {fmt} }} {cond}"
        )
    return tuple(lines)


def _frontend(
    host: str,
    port: int,
    domains: tuple[str, ...],
    proxy: ProxyConfig,
    edge_rules: Sequence[str],
) -> list[str]:
    return [
        "frontend fe_apps",
        *(f"    bind {address}:{port}" for address in host.split(",")),
        "    option http-keep-alive",
        "    option forwardfor",
        *(f"    {line}" for line in route_lines(domains)),
        EDGE_RULES_MARK.rjust(len(EDGE_RULES_MARK) + 4),
        *(f"    {line}" for line in edge_rules),
        "    # --- end of edge rules ---",
        *(f"    {line}" for line in backend_lines(domains, proxy)),
    ]


@functools.lru_cache(maxsize=8)
def route_lines(domains: tuple[str, ...]) -> tuple[str, ...]:
    """The frontend's lines before the edge rules (format, Host, forwarded headers, the route
    key): the edge's HTTPS frontend runs them too. Kept for the domains last asked about (as
    :func:`backend_lines`): the same at every route change."""
    pattern = "|".join(d.replace(".", "[.]") for d in domains)
    return (
        "http-request set-var(txn.fmt) str(json) if { req.hdr(accept) -m sub json } "
        "!{ req.hdr(accept) -m sub text/html }",
        "http-request set-var(txn.fmt) str(html) if !{ var(txn.fmt) -m found }",
        *_returns(400, "bad_request", "the request has no Host header", _NO_HOST),
        "http-request del-header x-forwarded-for",
        "http-request del-header x-forwarded-proto",
        "http-request del-header x-forwarded-host",
        "http-request del-header forwarded",
        # hop-by-hop headers (RFC 9110 7.6.1), as the Python ingress dropped them; Upgrade
        # only when Connection does not ask for it (a websocket's is passed on)
        "http-request del-header x-appdeck- -m beg",  # ours to set, never a client's
        "http-request del-header keep-alive",
        "http-request del-header te",
        "http-request del-header proxy-authorization",
        "http-request del-header proxy-connection",
        "http-request del-header upgrade unless { req.hdr(connection) -m sub -i upgrade }",
        "http-request set-header x-forwarded-proto http",
        "http-request set-header x-forwarded-host %[req.hdr(host)]",
        "http-request set-var(txn.host) req.hdr(host),host_only,lower,regsub([.]$,)",
        "http-request set-var(txn.route) var(txn.host),field(1,.) "
        f"if {{ var(txn.host) -m reg ^[a-z0-9-]{{1,63}}[.]({pattern})$ }}",
    )


@functools.lru_cache(maxsize=8)
def backend_lines(domains: tuple[str, ...], proxy: ProxyConfig) -> tuple[str, ...]:
    """The frontend's lines after the edge rules: the route's state and error pages, the body
    limit, ``use_backend``. A route key the edge set outside the keys' alphabet (``_control``:
    the control plane) is the edge's own backend: no state, no app body limit."""
    retry = f" hdr retry-after {proxy.retry_after}"
    hint = f"apps are reached as <app>--<tenant>.{domains[0]}"
    return (
        "http-request set-var(txn.state) var(txn.route),map(" + "@STATES@" + ",unknown) "
        "if { var(txn.route) -m found }",
        f"http-request set-var(txn.state) str(live) if {_EDGE_ROUTE}",
        "http-request set-var(txn.pk) var(txn.route),concat(:,txn.fmt,)",
        *_returns(404, "no_such_app", f"no app at this host: {hint}", _NO_ROUTE),
        *_returns(
            503,
            "stopped",
            f"app {_ROUTE} is stopped: its owner stopped it; it answers again once started",
            "{ var(txn.state) -m str stopped }",
            retry,
        ),
        *_returns(
            503,
            "not_deployed",
            f"app {_ROUTE} is not deployed yet: it answers once a release of it is live",
            "{ var(txn.state) -m str not_deployed }",
            retry,
        ),
        *_returns(
            503,
            "no_live_release",
            f"app {_ROUTE} has no live release",
            "{ var(txn.state) -m str no_live_release }",
            retry,
        ),
        *_returns(404, "no_such_app", f"no app named {_ROUTE}", "!{ var(txn.state) -m str live }"),
        *_returns(
            413,
            "body_too_large",
            f"the request body is larger than {proxy.max_body_size} bytes",
            f"{{ req.hdr_val(content-length) gt {proxy.max_body_size} }} !{_EDGE_ROUTE}",
        ),
        "http-after-response set-status 413 if { var(txn.too_big) -m found }",
        # an app's hop-by-hop headers stop here (HAProxy writes its own Connection)
        "http-response del-header connection",
        "http-response del-header keep-alive",
        "http-response del-header proxy-authenticate",
        "http-after-response set-status 502 if { res.hdr(x-appdeck-page) -m str 502 }",
        "http-after-response set-header content-type application/json "
        "if { res.hdr(x-appdeck-page) -m found } { var(txn.fmt) -m str json }",
        "http-after-response del-header x-appdeck-page",
        # a body whose size is not announced goes through the body-limit filter
        "use_backend bc_%[var(txn.route)] if { req.hdr(transfer-encoding) -m found } "
        f"!{_EDGE_ROUTE}",
        "use_backend bc_%[var(txn.route)] if !{ req.hdr(content-length) -m found } "
        f"!METH_GET !METH_HEAD !METH_OPTIONS !{_EDGE_ROUTE}",
        "use_backend be_%[var(txn.route)]",
    )


def _too_large(proxy: ProxyConfig) -> str:
    """``e413.map``: the 413 page per format, keyed as the body-limit filter marks it."""
    message = f"the request body is larger than {proxy.max_body_size} bytes"
    return "".join(
        f"413:{fmt} {_page(413, 'body_too_large', message, fmt)}\n" for fmt in ("json", "html")
    )


def _pages(routes: Sequence[str]) -> tuple[str, str]:
    """``e502.map`` and ``e504.map``: ``<route>:<fmt> <page>`` per route and format."""
    bad, slow = [], []
    for route in routes:
        for fmt in ("json", "html"):
            down = _page(502, "upstream_unavailable", f"app {route}: no answer", fmt, app=route)
            late = _page(504, "upstream_timeout", f"app {route}: no answer in time", fmt, app=route)
            bad.append(f"{route}:{fmt} {down}")
            slow.append(f"{route}:{fmt} {late}")
    return "\n".join(bad) + "\n", "\n".join(slow) + "\n"


def _servers(
    route: str,
    backends: Sequence[Backend],
    namespace: Callable[[str], str | None] | None,
    weights: dict[tuple[str, str], int],
    servers: dict[tuple[str, str], tuple[str, str]],
    expected: Mapping[str, str] | None = None,
) -> list[str]:
    """The server lines of ``route``'s backend; each server's weight and release noted.
    ``expected`` (server name -> upstream): instances started for the route and not routed
    yet, at weight 0, so that routing them later changes weights only (no reload)."""
    name = f"be_{route}"
    release_of = {}
    for b in backends:
        for position, upstream in enumerate(b.upstreams):
            release_of[server_name(b.release_id, upstream, position)] = b.release_id
    listed = server_weights(backends)
    routed = {server for server, _, _ in listed}
    for server, upstream in sorted((expected or {}).items()):
        if server not in routed:
            listed.append((server, upstream, 0))
            release_of[server] = server.rpartition("-")[0]
    lines = []
    for server, upstream, weight in listed:
        ns, _, address = upstream.rpartition("@")
        where = ""
        if ns:
            named = None if namespace is None else namespace(ns)
            if named is None:  # no namespace to reach it in: not routed (logged there)
                continue
            where = f" namespace {named}"
        lines.append(f"    server {server} {address} weight {weight}{where}")
        weights[(name, server)] = weight
        servers[(name, server)] = (route, release_of[server])
    return lines


HANDOFF_SERVER = "handoff"
"""The server of every route's backend that a stopping worker routes to (no release's: those
are ``<release>-<n>``)."""
HANDOFF_HEADER = "x-appdeck-handoff"
MAX_HOPS = 3
"""How many times a request may be handed from a stopping worker to the current one."""


@functools.lru_cache(maxsize=8)
def _handing_off(layout: Layout) -> tuple[str, ...]:
    """A route backend's lines that hand a request to the current worker when this one is
    stopping (a reload): a soft-stopping HAProxy worker closes the network namespaces its
    servers name (``netns_sig_stop``), so it could not reach a sandboxed instance, and its
    servers may be a release being stopped. The request keeps the headers this worker set;
    the header names the backend and the error-page format for the current worker."""
    # The worker that takes a handed request may have begun stopping too (the next reload
    # came meanwhile: its namespaces are closed) and hands it on; a request handed
    # MAX_HOPS times is served where it is (never a loop).
    when = f"{{ stopping }} {{ var(txn.hops) -m int lt {MAX_HOPS} }}"
    return (
        "    http-request set-var(txn.hops) int(0) unless { var(txn.hops) -m found }",
        f"    http-request set-header {HANDOFF_HEADER} "
        f"%[be_name]/%[var(txn.fmt)]/%[var(txn.hops)] if {when}",
        f"    use-server {HANDOFF_SERVER} if {when}",
        f"    server {HANDOFF_SERVER} unix@{layout.handoff} weight 0",
    )


def _handoff_frontend(layout: Layout) -> list[str]:
    """The current worker's side of :func:`_handing_off`: only a worker of this data plane
    reaches the socket (root's, mode 600). The request goes to the backend it was bound for,
    past the frontend's rules (the stopping worker ran them); a route this config no longer
    serves gets its 502 page."""
    name = HANDOFF_HEADER
    return [
        "",
        "frontend fe_handoff",
        f"    bind unix@{layout.handoff} mode 600",
        f"    http-request set-var(txn.hops) req.hdr({name}),field(3,/),add(1)",
        f"    http-request set-var(txn.be) req.hdr({name}),field(1,/)",
        f"    http-request set-var(txn.fmt) req.hdr({name}),field(2,/)",
        f"    http-request del-header {name}",
        "    http-request set-var(txn.route) var(txn.be),bytes(3)",
        "    http-request set-var(txn.pk) var(txn.route),concat(:,txn.fmt,)",
        "    http-request deny deny_status 502 unless "
        "{ var(txn.be) -m reg ^b[ce]_[a-z0-9-]{1,63}$ } { var(txn.fmt) -m reg ^(json|html)$ }",
        "    use_backend %[var(txn.be)]",
    ]


def _head(layout: Layout, proxy: ProxyConfig, edge_global: Sequence[str]) -> list[str]:
    """The ``global`` and ``defaults`` sections."""
    connect_ms = int(proxy.connect_timeout * 1000)
    # one inactivity timer toward the app in HAProxy 2.6 (to the headers and between body
    # pieces alike; no http-response set-timeout): the longer limit, so an event stream or a
    # long poll silent for less than idle_timeout is never cut (docs/data-plane-edge.md)
    server_ms = int(max(proxy.response_timeout, proxy.idle_timeout) * 1000)
    idle_ms = int(proxy.idle_timeout * 1000)
    return [
        "global",
        f"    stats socket {layout.stats} mode 600 level admin expose-fd listeners",
        "    stats timeout 30s",
        "    description appdeck-@DIGEST@",
        f"    maxconn {_maxconn()}",
        "    tune.bufsize 65536",  # request heads up to the Python ingress's 64 KiB
        f"    tune.http.maxhdr {max(1, min(32767, proxy.max_headers))}",
        # every new route reloads: an old worker lives on while clients hold streams on it;
        # bounded, so reloads cannot pile up workers (docs/data-plane-edge.md)
        f"    hard-stop-after {int(proxy.reload_drain_timeout * 1000)}ms",
        # HAProxy's own HTTP client (Lua's core.httpclient, the CLI's expert-mode
        # "httpclient") is never used by AppDeck; by default every start and reload loads the
        # system CA store for it: ~45 of a start's ~60 ms of CPU (docs/data-plane-edge.md)
        "    httpclient.ssl.verify none",
        f"    lua-load {layout.file(BODY_LUA)}",
        *(f"    {line}" for line in edge_global),
        # the request log, when asked for: one line a request with its termination state
        *((f"    log {proxy.log_target} len 8192 local0",) if proxy.log_target else ()),
        "",
        "defaults",
        "    mode http",
        *(("    log global", "    option httplog") if proxy.log_target else ()),
        "    option dontlognull",
        "    option redispatch 1",
        "    retries 1",
        f"    timeout connect {connect_ms}ms",
        f"    timeout server {server_ms}ms",
        f"    timeout client {idle_ms}ms",
        f"    timeout http-request {int(proxy.header_timeout * 1000)}ms",
        "    timeout http-keep-alive 15s",  # the Python ingress's; above clients' 5 s pools
        # at a reload an old worker answers the next request of each idle kept-alive
        # connection (handed to the current worker: _handing_off) with "connection: close",
        # rather than closing it under a client that may be sending just then
        "    option idle-close-on-response",
        f"    timeout tunnel {idle_ms}ms",
        "    balance roundrobin",
        f"    http-error status 503 content-type {_HTML} hdr x-appdeck-page 502 "
        f"lf-string '%[var(txn.pk),map({layout.file('e502.map')})]'",
        f"    http-error status 504 content-type {_HTML} hdr x-appdeck-page 504 "
        f"lf-string '%[var(txn.pk),map({layout.file('e504.map')})]'",
        # what HAProxy answers when the body-limit filter failed a request (else empty)
        f"    http-error status 400 content-type {_HTML} hdr x-appdeck-page 413 "
        f"lf-string '%[var(txn.too_big),concat(:,txn.fmt,),map({layout.file('e413.map')})]'",
        "",
    ]


def _backends(
    table: RouteTable,
    layout: Layout,
    proxy: ProxyConfig,
    states: Mapping[str, str],
    namespace: Callable[[str], str | None] | None,
    expected: Mapping[str, Mapping[str, str]] | None,
) -> tuple[list[str], dict[tuple[str, str], int], dict[tuple[str, str], tuple[str, str]]]:
    """Each live route's two backends (``be_``, and ``bc_`` behind the body-limit filter),
    with the servers' weights and upstreams by (backend, server)."""
    body: list[str] = []
    weights: dict[tuple[str, str], int] = {}
    servers: dict[tuple[str, str], tuple[str, str]] = {}
    for route, state in states.items():
        if state != "live":
            continue
        lines = [
            *_servers(
                route,
                table.get(route) or [],
                namespace,
                weights,
                servers,
                (expected or {}).get(route),
            ),
            *_handing_off(layout),
        ]
        body += ["", f"backend be_{route}", *lines]
        # the same servers for a body of unannounced size: counted by the body-limit filter
        body += ["", f"backend bc_{route}", f"    filter lua.{BODY_FILTER} {proxy.max_body_size}"]
        body += lines
        for (name, server), weight in list(weights.items()):
            if name == f"be_{route}":
                weights[(f"bc_{route}", server)] = weight
                servers[(f"bc_{route}", server)] = servers[(name, server)]
    return body, weights, servers


@functools.cache
def _body_lua() -> str:
    """The body-limit filter's source, as installed (read once)."""
    return resources.files(__package__).joinpath(BODY_LUA).read_text()


def render(
    table: RouteTable,
    layout: Layout,
    *,
    host: str,
    port: int,
    proxy: ProxyConfig,
    namespace: Callable[[str], str | None] | None = None,
    edge_rules: Sequence[str] = (),
    edge_sections: Sequence[str] = (),
    edge_global: Sequence[str] = (),
    edge_sections_of: Callable[[Sequence[str], Sequence[str]], Sequence[str]] | None = None,
    expected: Mapping[str, Mapping[str, str]] | None = None,
) -> Rendered:
    """The whole configuration for ``table``, listening on ``host`` (one address, or several
    comma-separated, IPv6 ones in brackets) at ``port``. ``namespace`` names the ``/run/netns``
    entry of an instance's network namespace (``"<release>.<index>"`` of an upstream
    ``"<release>.<index>@127.0.0.1:<port>"``; None: the instance is left out). ``expected``:
    route -> server name -> upstream of instances started and not routed yet (weight 0)."""
    routes = table.keys()
    states = {route: state_of(table, route) for route in routes}
    e502, e504 = _pages(routes)
    files = {
        "states.map": "".join(f"{r} {s}\n" for r, s in states.items()),
        "e502.map": e502,
        "e504.map": e504,
        "e413.map": _too_large(proxy),
        BODY_LUA: _body_lua(),
    }
    head = _head(layout, proxy, edge_global)
    frontend = _frontend(host, port, table.domains, proxy, edge_rules)
    states_map = str(layout.file("states.map"))
    frontend = [line.replace("@STATES@", states_map) for line in frontend]
    body, weights, servers = _backends(table, layout, proxy, states, namespace, expected)
    if edge_sections_of is not None:  # the edge's HTTPS frontend runs core's lines too
        where = str(layout.file("states.map"))
        after = [line.replace("@STATES@", where) for line in backend_lines(table.domains, proxy)]
        edge_sections = [*edge_sections, *edge_sections_of(route_lines(table.domains), after)]
    tail = ["", *edge_sections] if edge_sections else []
    text = "\n".join([*head, *frontend, *_handoff_frontend(layout), *body, *tail]) + "\n"
    draft = Rendered(text, files, weights, servers)
    final = text.replace("@DIGEST@", draft.digest)
    return Rendered(final, files, weights, servers, marker=f"appdeck-{draft.digest}")
