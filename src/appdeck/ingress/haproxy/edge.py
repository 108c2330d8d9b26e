"""HAProxy's edge: everything the data plane does at its door besides routing (issue 21).

``haproxy-core`` renders the whole configuration; this module gives it lines to put in:

- :func:`global_lines`: the ``global`` section's (the Lua step of the key gate);
- :func:`http_rules`: the HTTP frontend's, after core set ``txn.route`` from the Host and
  before its ``use_backend be_%[var(txn.route)]`` (``txn.route`` unset or empty is a 404);
- :func:`extra_sections`: whole sections (the HTTPS frontend, the control plane's backend,
  the loopback metrics frontend, the key-use table).

The rules, in the order a request meets them (the HTTPS frontend runs the same ones):

1. ``X-AppDeck-Key-Id`` and ``X-AppDeck-Edge`` are ours: a client's are dropped;
   ``X-Forwarded-Proto`` is ``https`` on TLS, ``http`` otherwise.
2. ACME HTTP-01: ``GET /.well-known/acme-challenge/<token>`` on any host is answered from
   ``acme.map`` (200 ``text/plain``, the key authorization), an unknown token 404; that path
   never reaches an app and is never redirected.
3. Hosts: a custom domain in ``hosts.map`` sets ``txn.route``; the control plane's public
   host sets it to :data:`CONTROL_ROUTE` (core's ``use_backend be_%[var(txn.route)]`` then
   picks :data:`CONTROL_BACKEND`).
4. Redirect: plain HTTP to a host that has a live certificate (``tls.map``: exact host or
   ``*.<parent>`` → its ``notAfter`` in ms) is a 308 to https.
5. The key gate, as :class:`appdeck.ingress.keys.KeyGate` decides: ``gate.map`` holds
   ``open`` once the control plane loaded the keys (until then every routed request is 503
   ``starting``); ``required.map`` route → app id; ``keys.map`` SHA-256 hex of a key →
   ``<app id>:<w|r>:<expiry ms or 0>:<key id>``. One ``X-API-Key`` and no
   ``Authorization`` is read by the config itself; any other shape goes through the Lua
   step (``edge.lua``), which finds the one key the request carries; the headers that
   carried it are removed either way; the rest is map converters. An admitted request
   goes on with ``X-AppDeck-Key-Id`` and its key's hash is tracked in
   :data:`KEY_USE_TABLE` (``gpt0`` = the epoch second of its last use), which the mirror
   reads for the keys' last use.
6. HSTS on HTTPS answers when ``hsts_seconds`` is set.

Files live under :class:`EdgePaths` (the data plane's directory core chooses);
:func:`prepare` creates them (empty maps, the default self-signed certificate HAProxy starts
with before anything is issued, the error pages, the Lua file, the control plane's secret)
and must run before HAProxy (re)starts. The mirror (:mod:`.mirror`) keeps them in step.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appdeck.ingress import keys
from appdeck.ingress.hosts import normalize
from appdeck.ingress.pages import error_page

__all__ = [
    "CONTROL_BACKEND",
    "CONTROL_ROUTE",
    "KEY_USE_TABLE",
    "EdgeOptions",
    "EdgePaths",
    "control_secret",
    "extra_sections",
    "global_lines",
    "http_rules",
    "prepare",
]

CONTROL_ROUTE: Final = "_control"
"""``txn.route`` of the control plane's public host: outside the route keys' alphabet."""
CONTROL_BACKEND: Final = f"be_{CONTROL_ROUTE}"
KEY_USE_TABLE: Final = "edge_key_use"
"""The stick table of admitted keys: key = SHA-256 hex, ``gpt0`` = last use (epoch s)."""
EDGE_HEADER: Final = "x-appdeck-edge"
"""What HAProxy adds toward the control plane: the secret that makes it trust X-Forwarded-*."""
SAFE_PATH: Final = re.compile(r"/[A-Za-z0-9/._-]+")
"""Paths that go into the config and runtime API commands: no space, quote, ``%`` or ``#``."""
BIND: Final = re.compile(r"(\[[0-9a-f:]+\]|[0-9.]+|[a-z0-9.-]*):[0-9]{1,5}")
ADDRESS: Final = re.compile(r"(\[[0-9a-f:]+\]|[0-9.]+):[0-9]{1,5}")


@dataclass(frozen=True, slots=True)
class EdgePaths:
    """Where the edge's files are: maps, certificates, crt-list, pages, Lua, secret."""

    root: Path

    def __post_init__(self) -> None:
        if not self.root.is_absolute() or not SAFE_PATH.fullmatch(str(self.root)):
            raise ValueError("the edge directory is an absolute path of [A-Za-z0-9/._-]")

    def map(self, name: str) -> Path:
        """``keys``, ``required``, ``gate``, ``hosts``, ``acme``, ``tls``: ``<root>/<name>.map``."""
        return self.root / f"{name}.map"

    @property
    def crt_list(self) -> Path:
        return self.root / "crt-list.txt"

    @property
    def certs(self) -> Path:
        return self.root / "certs"

    def cert(self, name: str) -> Path:
        """A certificate's file (chain then key), named as in :class:`~.certs.Certificates`."""
        return self.certs / f"{name}.pem"

    @property
    def default_cert(self) -> Path:
        return self.root / "default.pem"

    @property
    def lua(self) -> Path:
        return self.root / "edge.lua"

    @property
    def secret(self) -> Path:
        return self.root / "control.secret"

    def page(self, refusal: str, kind: str) -> Path:
        return self.root / "pages" / f"{refusal}.{kind}"


MAPS: Final = ("keys", "required", "gate", "hosts", "acme", "tls")


@dataclass(frozen=True, slots=True)
class EdgeOptions:
    """What the edge does besides the plain-HTTP rules (all off by default)."""

    https_bind: str | None = None
    """Where the HTTPS frontend listens (``:443``, ``127.0.0.1:8443``); None: no TLS."""
    https_port: int = 443
    """The HTTPS port clients reach (a redirect's target): 443 leaves it out of the URL."""
    hsts_seconds: int = 0
    """``Strict-Transport-Security: max-age=<n>`` on HTTPS answers; 0: none."""
    retry_after: int = 5
    control_host: str | None = None
    """The host of ``APPDECK_PUBLIC_URL`` when it is https and served by the data plane."""
    control_servers: tuple[str, ...] = ()
    """The control plane's loopback listeners (``127.0.0.1:8080``), one per replica."""
    metrics_port: int | None = None
    """HAProxy's Prometheus exporter on ``127.0.0.1:<port>/metrics``; None: off."""

    def __post_init__(self) -> None:
        if self.https_bind is not None and not BIND.fullmatch(self.https_bind):
            raise ValueError("https_bind is [host]:port")
        if not 1 <= self.https_port <= 65535:
            raise ValueError("https_port is 1 to 65535")
        if not 0 <= self.hsts_seconds <= 2**31 - 1:
            raise ValueError("hsts_seconds is 0 to 2^31-1")
        if not 0 <= self.retry_after <= 86_400:
            raise ValueError("retry_after is 0 to 86400")
        if self.control_host is not None and normalize(self.control_host) != self.control_host:
            raise ValueError("control_host is a lower-case DNS name")
        if any(not ADDRESS.fullmatch(s) for s in self.control_servers):
            raise ValueError("a control plane server is ip:port")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            raise ValueError("metrics_port is 1 to 65535")


# --- the key gate's refusals: (name, refusal) -----------------------------------------------
REFUSALS: Final = {
    "missing": keys.MISSING,
    "ambiguous": keys.AMBIGUOUS,
    "invalid": keys.INVALID,
    "expired": keys.EXPIRED,
    "read_only": keys.READ_ONLY,
    "closed": keys.CLOSED,
}
_ROUTE: Final = "@@ROUTE@@"
"""Where the route goes in a page: unchanged by HTML and JSON escaping."""


def global_lines(paths: EdgePaths) -> list[str]:
    """Lines for the ``global`` section."""
    return [f"lua-load {paths.lua}"]


def http_rules(paths: EdgePaths, options: EdgeOptions) -> list[str]:
    """The frontend lines between core's route rules and its ``use_backend``."""
    return [
        *_header_rules(),
        *_acme_rules(paths),
        *_host_rules(paths, options),
        *_redirect_rules(paths, options),
        *_gate_rules(paths, options),
        *_hsts_rules(options),
    ]


def _header_rules() -> list[str]:
    return [
        "http-request del-header x-appdeck-key-id",
        f"http-request del-header {EDGE_HEADER}",
        "http-request set-header x-forwarded-proto https if { ssl_fc }",
        "http-request set-header x-forwarded-proto http if !{ ssl_fc }",
        # the host as the maps hold it: lower case, no port, no trailing dot
        "http-request set-var(txn.edge_host) req.hdr(host),field(1,:),lower,regsub([.]$,)",
        "http-request set-var(txn.edge_now) date(0,ms)",
    ]


def _acme_rules(paths: EdgePaths) -> list[str]:
    shape = r"^/[.]well-known/acme-challenge/[A-Za-z0-9_-]{1,128}$"
    return [
        "acl edge_acme path_beg /.well-known/acme-challenge/",
        f"http-request set-var(txn.edge_acme) path,field(4,/),map({paths.map('acme')}) "
        f"if edge_acme METH_GET {{ path_reg {shape} }}",
        "http-request return status 200 content-type text/plain "
        'lf-string "%[var(txn.edge_acme)]" hdr cache-control no-store '
        "if edge_acme { var(txn.edge_acme) -m found }",
        "http-request return status 404 content-type text/plain "
        'string "no such ACME challenge" hdr cache-control no-store if edge_acme',
    ]


def _host_rules(paths: EdgePaths, options: EdgeOptions) -> list[str]:
    hosts = paths.map("hosts")
    lines = [
        f"http-request set-var(txn.route) var(txn.edge_host),map({hosts}) "
        f"if {{ var(txn.edge_host),map({hosts}) -m found }}",
    ]
    if options.control_host and options.control_servers:
        lines.append(
            f"http-request set-var(txn.route) str({CONTROL_ROUTE}) "
            f"if {{ var(txn.edge_host) -m str {options.control_host} }}"
        )
    return lines


def _redirect_rules(paths: EdgePaths, options: EdgeOptions) -> list[str]:
    if options.https_bind is None:
        return []
    tls = paths.map("tls")
    port = "" if options.https_port == 443 else f":{options.https_port}"
    return [
        f"http-request set-var(txn.edge_tls) var(txn.edge_host),map({tls}) if !{{ ssl_fc }}",
        f"http-request set-var(txn.edge_tls) var(txn.edge_host),regsub(^[^.]*,*),map({tls}) "
        "if !{ ssl_fc } !{ var(txn.edge_tls) -m found }",
        f"http-request redirect location https://%[var(txn.edge_host)]{port}%[pathq] code 308 "
        "if !{ ssl_fc } { var(txn.edge_tls),sub(txn.edge_now) gt 0 }",
    ]


def _gate_rules(paths: EdgePaths, options: EdgeOptions) -> list[str]:
    gated = "edge_gated"
    entry = "var(txn.edge_entry)"
    return [
        "acl edge_routed var(txn.route),length gt 0",
        f"acl edge_control var(txn.route) -m str {CONTROL_ROUTE}",
        f"acl edge_open str(open),map({paths.map('gate')}) -m found",
        "acl edge_json req.hdr(accept) -m sub json",
        "acl edge_html req.hdr(accept) -m sub text/html",
        *_refuse(paths, options, "closed", "edge_routed !edge_control !edge_open"),
        f"http-request set-var(txn.edge_app) var(txn.route),map({paths.map('required')}) "
        "if edge_routed",
        f"acl {gated} var(txn.edge_app) -m found",
        *_one_key_rules(gated),
        f"http-request lua.appdeck_key if {gated} !{{ var(txn.edge_key_state) -m found }}",
        *_refuse(
            paths, options, "missing", f"{gated} {{ var(txn.edge_key_state) -m str missing }}"
        ),
        *_refuse(
            paths, options, "ambiguous", f"{gated} {{ var(txn.edge_key_state) -m str ambiguous }}"
        ),
        f"http-request set-var(txn.edge_hash) var(txn.edge_key),sha2(256),hex,lower "
        f"if {gated} {{ var(txn.edge_key_state) -m str ok }}",
        f"http-request set-var(txn.edge_entry) var(txn.edge_hash),map({paths.map('keys')}) "
        f"if {gated} {{ var(txn.edge_hash) -m found }}",
        # another app's key, an unknown one, or a value that is no key of ours
        *_refuse(
            paths,
            options,
            "invalid",
            f"{gated} !{{ {entry},field(1,:),strcmp(txn.edge_app) eq 0 }}",
        ),
        *_refuse(
            paths,
            options,
            "expired",
            f"{gated} {{ {entry},field(3,:) -m int gt 0 }} "
            f"{{ {entry},field(3,:),sub(txn.edge_now) le 0 }}",
        ),
        *_refuse(
            paths,
            options,
            "read_only",
            f"{gated} !{{ {entry},field(2,:) -m str w }} !METH_GET !METH_OPTIONS",
        ),
        f"http-request set-header x-appdeck-key-id %[{entry},field(4,:)] if {gated}",
        f"http-request track-sc2 var(txn.edge_hash) table {KEY_USE_TABLE} if {gated}",
        f"http-request sc-set-gpt0(2) date if {gated}",
    ]


def _one_key_rules(gated: str) -> list[str]:
    """The common case without Lua: one ``X-API-Key`` and no ``Authorization`` header
    (HAProxy already trimmed the value); every other shape goes to ``edge.lua``. Measured:
    the Lua step costs about a quarter of HAProxy's throughput on a gated route."""
    one = f"{gated} edge_one_key edge_no_auth"
    key = "var(txn.edge_key)"
    return [
        "acl edge_one_key req.fhdr_cnt(x-api-key) eq 1",
        "acl edge_no_auth req.fhdr_cnt(authorization) eq 0",
        f"http-request set-var(txn.edge_key) req.fhdr(x-api-key) if {one}",
        f"http-request set-var(txn.edge_key_state) str(missing) if {one} !{{ {key},length gt 0 }}",
        f"http-request set-var(txn.edge_key_state) str(ok) if {one} "
        f"!{{ var(txn.edge_key_state) -m found }} {{ {key},length le {keys.MAX_KEY_BYTES} }} "
        f"{{ {key} -m beg {keys.KEY_PREFIX.decode()} }}",
        f"http-request set-var(txn.edge_key_state) str(invalid) if {one} "
        "!{ var(txn.edge_key_state) -m found }",
        f"http-request del-header x-api-key if {one}",
    ]


def _refuse(paths: EdgePaths, options: EdgeOptions, name: str, condition: str) -> list[str]:
    """The two ``return`` lines of a refusal: JSON when the client asks for it, else HTML."""
    status = REFUSALS[name].status
    if status == 401:
        extra = " hdr www-authenticate ApiKey"
    elif status == 503:
        extra = f" hdr retry-after {options.retry_after}"
    else:
        extra = ""
    head = f"http-request return status {status} content-type"
    tail = f" hdr cache-control no-store{extra} if {condition}"
    return [
        f"{head} application/json lf-file {paths.page(name, 'json')}{tail} edge_json !edge_html",
        f'{head} "text/html; charset=utf-8" lf-file {paths.page(name, "html")}{tail}',
    ]


def _hsts_rules(options: EdgeOptions) -> list[str]:
    if not options.hsts_seconds or options.https_bind is None:
        return []
    return [
        "http-after-response set-header strict-transport-security "
        f"max-age={options.hsts_seconds} if {{ ssl_fc }}"
    ]


def control_server_name(address: str) -> str:
    """A control plane listener's server name: the same in every replica's config."""
    return "cp-" + hashlib.sha256(address.encode()).hexdigest()[:12]


def extra_sections(
    paths: EdgePaths,
    options: EdgeOptions,
    route_lines: Sequence[str] = (),
    backend_lines: Sequence[str] = (),
    control_servers: Sequence[str] | None = None,
) -> list[str]:
    """Whole sections: the key-use table, and when configured the HTTPS frontend (``route_lines``
    and ``backend_lines`` are core's, around :func:`http_rules`, as in its HTTP frontend), the
    control plane's backend (``control_servers``: every replica's listener, see
    :mod:`.control`; default: this one's) and the metrics frontend."""
    servers = options.control_servers if control_servers is None else tuple(control_servers)
    if any(not ADDRESS.fullmatch(s) for s in servers):
        raise ValueError("a control plane server is ip:port")
    lines = [
        f"backend {KEY_USE_TABLE}",
        "  stick-table type string len 64 size 200k expire 24d store gpt0",
    ]
    if options.https_bind is not None:
        lines += [
            "frontend fe_edge_https",
            "  mode http",
            "  option http-keep-alive",
            "  option forwardfor",
            f"  bind {options.https_bind} ssl crt {paths.default_cert} "
            f"crt-list {paths.crt_list} alpn h2,http/1.1",
            *(f"  {line}" for line in (*route_lines, *http_rules(paths, options), *backend_lines)),
        ]
    if options.control_host and options.control_servers:
        lines += [
            f"backend {CONTROL_BACKEND}",
            "  mode http",
            "  balance roundrobin",
            "  option httpchk",  # with the public Host: the control plane refuses others
            f"  http-check send meth GET uri /healthz ver HTTP/1.1 hdr host {options.control_host}",
            "  http-request set-header x-forwarded-for %[src]",
            f"  http-request set-header x-forwarded-host {options.control_host}",
            f"  http-request set-header {EDGE_HEADER} {control_secret(paths)}",
            "  option allbackups",
            # MCP's event streams sit idle up to APPDECK_KEEPALIVE_SECONDS between pings: the
            # apps' 30 s response timeout would cut them; the control plane bounds its own
            "  timeout server 10m",
            "  timeout tunnel 1h",
            *(
                f"  server {control_server_name(address)} {address} check inter 2s"
                for address in servers
            ),
            # the same listeners unchecked, as backups: a check that failed while serve was
            # starting (its socket queues connections from the first moment, before it
            # answers) marks a server DOWN until two checks pass; no 503 in that window
            *(f"  server {control_server_name(address)}b {address} backup" for address in servers),
        ]
    if options.metrics_port is not None:
        lines += [
            "frontend fe_edge_metrics",
            "  mode http",
            f"  bind 127.0.0.1:{options.metrics_port}",
            "  http-request use-service prometheus-exporter if { path /metrics }",
            "  http-request return status 404",
        ]
    return lines


# --- files -----------------------------------------------------------------------------------


def prepare(paths: EdgePaths) -> None:
    """Create what the config names and HAProxy must find at start: every map (empty when
    new), the crt-list, the default certificate, the pages, the Lua file and the secret.
    Idempotent; what the mirror wrote is kept."""
    paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths.certs.mkdir(mode=0o700, exist_ok=True)
    (paths.root / "pages").mkdir(mode=0o700, exist_ok=True)
    for name in MAPS:
        if not paths.map(name).exists():
            write_atomic(paths.map(name), b"")
    if not paths.crt_list.exists():
        write_atomic(paths.crt_list, b"")
    if not paths.default_cert.exists():
        write_atomic(paths.default_cert, self_signed())
    _refresh(paths.lua, resources.files(__package__).joinpath("edge.lua").read_bytes())
    for name in REFUSALS:
        for kind in ("json", "html"):
            _refresh(paths.page(name, kind), _page(name, kind))
    control_secret(paths)


def _refresh(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` (rewritten only when it does not: :func:`prepare` runs before
    every reload, and rewriting a dozen unchanged files was a dozen writes and syncs each)."""
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    write_atomic(path, data)


def control_secret(paths: EdgePaths) -> str:
    """The secret HAProxy sends the control plane (created on first use, mode 600)."""
    if not paths.secret.exists():
        paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(paths.secret, secrets.token_hex(32).encode())
    return paths.secret.read_text().strip()


def _page(name: str, kind: str) -> bytes:
    """A refusal page as a log-format file: ``%`` escaped, the route a sample fetch."""
    status, code, message = REFUSALS[name]
    accept = b"application/json" if kind == "json" else b"text/html"
    _, body = error_page(status, code, f"app {_ROUTE}: {message}", accept, app=_ROUTE)
    text = body.decode().replace("%", "%%")
    if kind == "json":
        route = "%[var(txn.route),json(utf8s)]"
    else:  # a route key is [a-z0-9-]; anything else is dropped rather than escaped
        route = "%[var(txn.route),regsub([^a-z0-9-],,g)]"
    return text.replace(_ROUTE, route).encode()


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` whole (a reader never sees half a file). The replicas of one install
    on a host share its data plane and may write the same file at once (two started together
    did: each replica's mirror writes every map at its start): each writer has a temporary
    file of its own, so none truncates, moves or removes another's."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def self_signed() -> bytes:
    """A self-signed certificate and its key (PEM): what HAProxy answers an unknown SNI with."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "appdeck default certificate")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
