"""Settings, from ``APPDECK_*`` environment variables (and the CLI, which overrides them).

List settings take the form a person types: ``APPDECK_SOURCE_ROOTS`` is ``os.pathsep``-separated
(``/srv/a:/srv/b``), the others are comma-separated (``a.example,b.example``); a JSON list
(``["/srv/a"]``) is accepted too. :func:`load` turns any bad value into one
:class:`InvalidSetting` line naming the ``APPDECK_*`` variable, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
from ipaddress import IPv4Network, IPv6Network, ip_address
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from appdeck import __version__

_SYSLOG_TARGET = re.compile(
    r"(?:(?:\d{1,3}\.){3}\d{1,3}|\[[0-9A-Fa-f:.]{2,45}\]):"
    r"(?:[1-9]\d{0,3}|[1-5]\d{4}|6[0-4]\d{3}|65[0-4]\d{2}|655[0-2]\d|6553[0-5])"
    r"|/[A-Za-z0-9._/-]{1,200}"
)
"""``APPDECK_DATA_PLANE_LOG``: a syslog server's IP address and port, or a unix socket's path
(no DNS name: HAProxy resolves it at every reload, and a reload would fail with the DNS)."""


def _an_address_or_path(target: str) -> bool:
    """Past :data:`_SYSLOG_TARGET`'s shape: the address is one (``999.1.1.1`` is not)."""
    if target.startswith("/"):
        return True
    host = target.rsplit(":", 1)[0].removeprefix("[").removesuffix("]")
    try:
        ip_address(host)
    except ValueError:
        return False
    return True


# NoDecode: pydantic-settings would parse these as JSON; the validators below split them instead
PathList = Annotated[list[Path], NoDecode]
StrList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="APPDECK_", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """What is passed (the CLI's values), then ``APPDECK_*`` variables: no ``.env`` file
        and no secrets directory are read (none is configured), and leaving their sources out
        saves their walk over every field: 7.7 -> 4.5 ms a ``Settings`` (the test suite makes
        thousands)."""
        return (init_settings, env_settings)

    data_dir: Path = Path(".appdeck")
    database_url: str | None = None
    """``postgresql+asyncpg://…`` for PostgreSQL; default: SQLite in the data dir."""
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    ingress_port: int = Field(8088, ge=0, le=65535)
    public_url: str | None = None
    """The URL clients reach the server at (behind a proxy); default: http://host:port."""
    allowed_hosts: StrList = []
    """Extra Host header names accepted on /mcp (DNS-rebinding defence); comma-separated."""
    allowed_origins: StrList = []
    """Extra browser origins accepted on /mcp; comma-separated."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["console", "json"] = "console"
    log_libraries: Literal["debug", "info", "warning", "error"] | None = None
    """The level of every logger not AppDeck's own (drivers, SQLAlchemy, uvicorn, httpx);
    default ``warning`` (or ``log_level`` when higher): ``debug`` shows the driver chatter."""

    keepalive_seconds: float = Field(30.0, gt=0)
    sse_retry_ms: int = Field(1000, ge=0)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # both listeners (control plane and ingress): transport.http11.HttpLimits
    max_header_bytes: int = Field(64 * 1024, ge=4096)
    max_headers: int = Field(100, ge=16)
    header_timeout_seconds: float = Field(10.0, gt=0)
    body_timeout_seconds: float = Field(30.0, gt=0)
    max_connections_per_ip: int = Field(256, ge=1)
    idle_connection_seconds: int = Field(75, ge=1, le=3600)
    """How long the control plane keeps an idle keep-alive connection open. Longer than
    clients' own pool expiry (httpx: 5 s) so the client closes first: a server closing at the
    moment the client reuses the connection loses that request (a ReadError under load)."""
    max_concurrency: int = Field(2000, ge=1)
    session_idle_seconds: float = Field(3600.0, gt=0)
    max_sessions: int = Field(10_000, ge=1)
    """Sessions over all users: a last resort (503); the per-user cap keeps one user below it."""
    max_sessions_per_user: int = Field(100, ge=1)
    """Sessions one (tenant, user) may hold; past it, ``initialize`` evicts their own least
    recently active session."""
    max_sessions_per_token: int = Field(50, ge=1)
    """Sessions one token (an access token's jti, a PAT) may hold; evicted the same way."""
    event_retention_seconds: float = Field(3600.0, gt=0)
    stream_lease_seconds: float = Field(10.0, ge=1, le=300)
    """Replica mode: how long a replica that died keeps a session's GET stream (a live one
    renews it every third of this); a resumption with Last-Event-ID takes it over at once."""
    sweep_seconds: float = Field(30.0, gt=0)
    client_request_timeout: float = Field(300.0, gt=0)
    task_default_ttl_ms: int = Field(3_600_000, ge=1000)
    task_max_ttl_ms: int = Field(86_400_000, ge=1000)
    task_poll_ms: int = Field(1000, ge=100)

    # -- auth --------------------------------------------------------------------------------
    issuer: str | None = None
    """An external IdP's issuer; with ``jwks_url`` it replaces the embedded server."""
    jwks_url: str | None = None
    audience: str | None = None
    """The ``aud`` tokens must carry; default: the canonical /mcp URL."""
    tenant_claim: str = "tid"
    user_claim: str = "sub"
    jwt_algorithms: StrList = Field(["ES256"], min_length=1)
    """Algorithms an external IdP's tokens may be signed with; comma-separated."""
    jwks_refetch_seconds: float = Field(60.0, ge=0)
    """At most one fetch of an external IdP's key set per this many seconds (unknown kid)."""
    access_token_ttl_seconds: int = Field(3600, ge=60)
    refresh_token_ttl_seconds: int = Field(30 * 86400, ge=300)
    auth_code_ttl_seconds: int = Field(300, ge=30)
    cimd_allow_loopback: bool = False
    """Let Client ID Metadata Documents be fetched from loopback/private hosts (tests only)."""
    rate_limit_per_second: float = Field(50.0, ge=0)
    """Sustained requests per second per token; 0 turns rate limiting off."""
    rate_limit_burst: int = Field(200, ge=1)
    rate_limit_lease_seconds: float = Field(0.1, ge=0, le=10)
    """Replica mode: how long a replica spends tokens it leased from the shared bucket before
    giving back the rest (up to ``rate x this`` at once, at most 64; 0 = one Redis round trip
    per call). Each replica may grant that many over the limit (``auth/ratelimit.py``)."""
    auth_failures_per_ip: int = Field(50, ge=1)
    """Failed authentications (401) at /mcp one client IP may make per minute; past that it
    waits 1 s, doubled at each further failure (up to 5 min), before anything it sends is
    looked at (429)."""
    sign_in_failures_per_ip: int = Field(20, ge=1)
    """Wrong passwords on the sign-in page per client IP per 15 minutes, then a growing wait."""
    sign_in_failures_per_account: int = Field(5, ge=1)
    """Wrong passwords per account (tenant + username) per 15 minutes, then a growing wait."""
    register_per_ip_per_hour: int = Field(20, ge=1)
    """Dynamic client registrations (``POST /register``) per client IP per hour."""
    unused_client_hours: float = Field(24.0, gt=0)
    """A dynamically registered client that got no authorization code within this many hours
    is deleted by the periodic sweep."""
    auth_trust_seconds: float = Field(10.0, ge=0)
    """How long a PAT lookup, a user's or tenant's enabled state and the revoked-token list
    are trusted before the database is asked again (what the CLI changes takes this long)."""

    # -- platform ------------------------------------------------------------------------
    sandbox: Literal["on", "off", "auto"] = "on"
    """``on``: every build and instance of an app runs sandboxed (its own uid, namespaces and
    limits), and the server refuses to start where it cannot; ``off``: apps run as the
    server's user, unconfined (one-tenant dev machines only; warned at every start);
    ``auto`` (what ``serve --dev`` uses when this is unset): on where possible, else off."""
    egress_allow: Annotated[list[IPv4Network | IPv6Network], NoDecode] = []
    """Networks (CIDR, comma-separated) sandboxes may reach through the outbound proxy besides
    public addresses: an internal package mirror, say. Never this host's own addresses."""
    sandbox_uid_base: int | None = Field(None, ge=1000, le=2**31 - 2)
    """App ``n`` runs as uid/gid ``sandbox_uid_base + n`` (65,536 uids). Default: the range
    recorded in the data dir's ``install.json``; a new install takes a free one from the
    host's registry (``APPDECK_INSTALL_REGISTRY``), an existing data dir keeps 200,000.
    Set it only to choose a range yourself: no host user and no other install may have it."""
    sandbox_cgroup: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    """The cgroup, under the host's hierarchy, that this server's builds and instances live
    in. Default: ``appdeck/<install id>`` (``appdeck`` for a data dir older than install ids).
    Two servers on one host must never share one: release ids repeat across data dirs."""
    secret_key: str | None = None
    """Encrypts env var values at rest; default: a key generated into the data dir."""
    metrics_token: str | None = Field(None, min_length=16, max_length=256, pattern=r"^[!-~]+$")
    """The scrape token of ``/metrics`` (``Authorization: Bearer <token>``). A client on
    loopback scrapes without it; any other client (the server listening beyond loopback, or
    reached through the data plane) is refused without it, and always when it is unset."""
    otlp_endpoint: str | None = Field(None, max_length=2048, pattern=r"^https?://[!-~]+$")
    """Traces over OTLP/HTTP to ``<this>/v1/traces`` (``docs/observability.md``); default:
    off, unless the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is
    set. The other ``OTEL_*`` variables (service name, sampler, headers) are honoured."""
    metrics_app_labels: int = Field(200, ge=0, le=100_000)
    """How many apps get an ``app`` label of their own in the app series (the first by id);
    the others are summed into ``app="_other"`` (docs/observability.md)."""
    source_roots: PathList = []
    """Directories app sources may be read from, ``os.pathsep``-separated; ``{tenant}`` in a
    root stands for the caller's tenant id. Default: ``<data dir's parent>/appdeck-sources/
    {tenant}`` (see :mod:`appdeck.platform.sources`, which owns the rule)."""
    max_apps_per_tenant: int = Field(100, ge=1)
    apps_database_url: str | None = None
    """PostgreSQL platforms: the database holding each app's schema (``postgresql+asyncpg://``);
    default ``<platform db>_apps`` on the same server, created when missing."""
    apps_role_prefix: str | None = Field(None, pattern=r"^[a-z_][a-z0-9_]{0,39}$")
    """PostgreSQL platforms: app ``n``'s role is ``<prefix>n``; default ``<apps db>_app_``
    (roles are cluster-wide: two platforms on one cluster must not share a prefix)."""

    redis_url: str | None = None
    """Replica mode (docs/replicas.md): several ``appdeck serve`` behind one URL share
    sessions, streams, tasks and locks through Redis and the PostgreSQL database. Needs
    ``APPDECK_DATABASE_URL`` on PostgreSQL and the same ``APPDECK_SECRET_KEY`` on every
    replica. Declared after both: its check reads them."""
    redis_prefix: str = Field("appdeck", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """Every Redis key and channel starts with ``<prefix>:``: two deployments on one Redis
    must not share a prefix."""

    with_conformance_fixtures: bool = False
    stateless_era: bool = True
    """Serve MCP 2026-07-28 (stateless: ``server/discover``, per-request ``_meta``) beside
    the handshake era on the same URL (docs/mcp-2026-07-28.md). Clients that initialize get
    2025-11-25 exactly as before; clients that speak the current revision (the Python SDK
    2.x in its default ``auto`` mode) get it as soon as ``server/discover`` answers. Set
    ``APPDECK_STATELESS_ERA=false`` to refuse discover so every client falls back to the
    handshake."""
    app_version: str = Field(
        __version__, validation_alias=AliasChoices("APP_VERSION", "APPDECK_APP_VERSION")
    )
    """What ``/healthz`` and ``serverInfo.version`` report: the package's version unless a
    deployment names its own label (``APP_VERSION``, set and not blank)."""

    # -- disk quotas per app (issue 19, finding 4: task "disk") ---------------------------
    disk_quota: Literal["auto", "loop", "account", "off"] = "auto"
    """How each app's disk (workspaces, database directory, ``/tmp``) is limited
    (docs/sandbox.md, "Disk"): ``loop``: a loop-mounted ext4 image per app, enforced by the
    kernel (root, loop devices, ``mkfs.ext4``; the server refuses to start where it cannot);
    ``account``: a periodic walk stops an app over its limit; ``off``: not limited; ``auto``:
    ``loop`` where the app sandbox is on and loop images work, else ``account`` (warned)."""
    app_disk_mb: int = Field(1024, ge=64, le=1_048_576)
    """An app's disk in MiB when its spec names no ``resources.disk_mb`` (at most
    ``APPDECK_MAX_APP_DISK_MB``): a quarter (16 MiB to 1 GiB) is its ``/tmp``, the rest its
    workspaces and database directory."""
    disk_check_seconds: float = Field(30.0, ge=1.0, le=3600.0)
    """``account`` mode: how often each running app's directories are measured."""
    # -- quota (issue 19): operator ceilings per app, quotas per tenant (docs/sandbox.md) ---
    max_instance_memory_mb: int = Field(2048, ge=32, le=65536)
    """Ceiling of ``resources.memory_mb`` (MiB per instance, swap included); a spec beyond it
    is ``invalid_argument``."""
    max_instance_cpus: float = Field(2.0, ge=0.05, le=64)
    """Ceiling of ``resources.cpus`` (per instance)."""
    max_instance_pids: int = Field(512, ge=16, le=32768)
    """Ceiling of ``resources.pids`` (processes per instance)."""
    max_instances_per_app: int = Field(4, ge=1, le=10)
    """Ceiling of ``instances`` (per app)."""
    max_app_disk_mb: int = Field(1024, ge=64, le=1048576)
    """Ceiling of ``resources.disk_mb`` (an app's workspace, data and /tmp in all); a spec
    that does not say gets ``APPDECK_APP_DISK_MB``, at most this."""
    tenant_memory_mb: int = Field(8192, ge=32, le=16_777_216)
    """Quota: instances x memory_mb summed over a tenant's apps (``quota_exceeded``)."""
    tenant_instances: int = Field(16, ge=1, le=100_000)
    """Quota: instances summed over a tenant's apps."""
    tenant_disk_mb: int = Field(8192, ge=64, le=1_073_741_824)
    """Quota: ``resources.disk_mb`` summed over a tenant's apps."""

    # -- data plane edge (issue 21: HAProxy's TLS, HSTS, metrics; ingress/haproxy/edge.py) --
    hsts_seconds: int = Field(0, ge=0, le=2**31 - 1)
    """``Strict-Transport-Security: max-age=<n>`` on the data plane's HTTPS answers; 0 = off.
    Once on, browsers refuse plain HTTP to those hosts for that long: raise it gradually."""
    data_plane_metrics_port: int | None = Field(None, ge=1, le=65535)
    """HAProxy's Prometheus exporter at ``http://127.0.0.1:<port>/metrics`` (loopback only,
    never through an app's hostname); unset = off."""
    https_port: int | None = Field(None, ge=1, le=65535)
    """The data plane's HTTPS listener (``APPDECK_DATA_PLANE=haproxy``), on ``host`` at this
    port: certificates by SNI, the redirect from HTTP once a host's certificate is live, and
    the control plane at an https ``APPDECK_PUBLIC_URL``; unset = no HTTPS frontend."""

    @field_validator("app_version")
    @classmethod
    def _version_or_ours(cls, value: str) -> str:
        return value.strip() or __version__

    @field_validator("redis_url")
    @classmethod
    def _replicas_need_shared_state(cls, value: str | None, info: ValidationInfo) -> str | None:
        if not value:
            return None
        if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        database = info.data.get("database_url") or ""
        if not str(database).startswith("postgresql"):
            raise ValueError(
                "replicas share one PostgreSQL database: set APPDECK_DATABASE_URL to a "
                "postgresql+asyncpg:// URL (SQLite is one process's file)"
            )
        if not info.data.get("secret_key"):
            raise ValueError(
                "replicas share one secret key (sealed secrets, signing keys): set "
                "APPDECK_SECRET_KEY, the same on every replica"
            )
        return value

    @field_validator("source_roots", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        return _split(value, os.pathsep)

    @field_validator(
        "allowed_hosts", "allowed_origins", "jwt_algorithms", "egress_allow", mode="before"
    )
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        return _split(value, ",")

    def database(self) -> str:
        if self.database_url:
            return self.database_url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite+aiosqlite:///{(self.data_dir / 'appdeck.db').resolve()}"

    @property
    def external_idp(self) -> bool:
        return bool(self.issuer and self.jwks_url)

    def base_url(self, port: int | None = None) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        if ":" in host and not host.startswith("["):  # an IPv6 address: [::1]:8080
            host = f"[{host}]"
        return f"http://{host}:{port if port is not None else self.port}"

    # -- install (issue 19, finding 9: one install, one namespace) --------------------------
    install_registry: Path = Path("/var/lib/appdeck/installs")
    """The host-wide registry of installs' uid ranges (one entry and lock file per range,
    see :mod:`appdeck.runtime.install`); every install on a host must use the same.
    On disk, not in ``/run``: ranges are kept across reboots, like the files their uids own."""
    runtime_root: Path = Path("/run/appdeck")
    """Where each install's runtime dir (``<root>/<install id>``: its sandboxes' stage) is."""

    # -- issue 21 §1: the data plane ------------------------------------------------------
    data_plane: Literal["haproxy"] = "haproxy"
    """HAProxy routes the apps, a process beside ``appdeck serve`` that outlives it
    (:mod:`appdeck.ingress.haproxy`, files in ``<runtime_root>/<install>/haproxy``). The
    in-process Python ingress (``python``) was removed with issue 21: the setting stays so
    that a configuration naming it is refused with the choice there is."""
    haproxy_binary: Path = Path("/usr/sbin/haproxy")
    data_plane_log: str | None = None
    """HAProxy's request log: one line a request (``option httplog``: timings, status and the
    termination state that says which side ended it), sent as syslog (facility ``local0``) to
    ``<ip>:<port>`` over UDP (``[<ipv6>]:<port>``) or to the unix datagram socket at an
    absolute path (``/dev/log``); unset = off. It holds the apps' URLs and clients' addresses."""

    @field_validator("data_plane_log")
    @classmethod
    def _syslog_target(cls, value: str | None) -> str | None:
        """It is written into HAProxy's configuration: nothing but an address or a path."""
        if not value:
            return None
        if not _SYSLOG_TARGET.fullmatch(value) or not _an_address_or_path(value):
            raise ValueError(
                "must be <ip>:<port> (an IPv4 address or [IPv6]; no DNS name, which every "
                "HAProxy reload would have to resolve) or the absolute path of a unix datagram "
                "socket, with no spaces"
            )
        return value

    # -- issue 20 item 5 (git): the data dir is resolved once, at start ---------------------
    @field_validator("data_dir")
    @classmethod
    def _absolute_data_dir(cls, value: Path) -> Path:
        """The data dir as an absolute path, resolved once against the working directory the
        server starts in (the default ``.appdeck`` is relative): every path derived from it
        (keys, database, repo cache, a commit's checkout handed to a build) is absolute."""
        return value.expanduser().resolve()

    # -- outbound calls and webhook replays (issue 19: findings 5 and 8, the outbound task) --
    outbound_connections: int = Field(50, ge=2, le=1000)
    """test_api and discover_apis: calls to apps in flight at once, all tenants together
    (the outbound pool's connections)."""
    outbound_per_tenant: int = Field(10, ge=1, le=1000)
    """One tenant's share of ``APPDECK_OUTBOUND_CONNECTIONS`` (at most that many): its calls
    beyond it wait for its own to end, never take another tenant's."""
    outbound_wait_s: float = Field(5.0, ge=0, le=60)
    """How long a call waits for a free slot of its tenant's share (or the pool's) before it
    is ``unavailable``; never past the call's own deadline."""
    webhook_replay_window_s: int = Field(3 * 86_400, ge=3600, le=30 * 86_400)
    """How long a webhook delivery (its ``X-GitHub-Delivery`` and its body's hash) is
    remembered: the same delivery again within it is answered 200 and does nothing. Past it,
    a replayed push still never moves a branch's deployed commit back (docs/repos.md)."""
    # -- each app's hosted git repository (issue 21 §4: docs/push.md) --
    hosted_repos: bool = True
    """Serve each app's git remote at ``/git/<tenant>/<app>.git`` and take inline files."""
    hosted_max_push_bytes: int = Field(100 << 20, ge=1 << 20, le=10 << 30)
    """Bytes of one push (the request body, and git's ``receive.maxInputSize``)."""
    hosted_max_repo_bytes: int = Field(500 << 20, ge=1 << 20, le=100 << 30)
    """A push to an app's repository this large or larger is refused."""
    hosted_timeout_s: float = Field(120.0, ge=5, le=3600)
    """One git request (a push, a fetch) or inline commit, start to end."""
    hosted_max_pushes_per_app: int = Field(1, ge=1, le=16)
    """Pushes under way at once to one app (per replica); more are answered 429."""
    inline_max_files: int = Field(1000, ge=1, le=100_000)
    """Files in one ``files`` argument (import_and_deploy, deploy_app)."""
    inline_max_bytes: int = Field(3 << 20, ge=1024, le=1 << 30)
    """Decoded bytes of one ``files`` argument (the MCP body cap applies too)."""
    max_source_mb: int = Field(256, ge=1, le=64 << 10)
    """The largest prepared workspace served at ``/internal/releases/<id>/workspace.tar`` to
    a Kubernetes pod; the driver's ``ClusterLimits.max_source_mb`` (docs/kubernetes.md)."""

    # -- automatic TLS (issue 21 §3: platform/tls, docs/tls.md) -----------------------------
    acme_directory: str | None = None
    """The ACME CA's directory URL (``https://acme-v02.api.letsencrypt.org/directory``);
    unset: no certificate is ordered."""
    acme_email: str | None = None
    """The ACME account's contact (expiry notices from the CA); optional."""
    acme_ca_bundle: Path | None = None
    """A PEM bundle to trust the ACME server with (a test CA such as Pebble's)."""
    tls_cert: Path | None = None
    """The operator's own certificate chain (PEM), instead of or beside ACME: checked at
    start (key matches, valid now); the names it covers are never ordered."""
    tls_key: Path | None = None
    acme_orders_per_tenant_hour: int = Field(20, ge=1, le=10_000)
    """Orders one tenant's names may cause per hour (a tenant cannot make us hammer the CA)."""
    acme_names_per_app: int = Field(10, ge=1, le=100)
    acme_max_waiting: int = Field(500, ge=1, le=100_000)
    """Names without a certificate at most, all tenants together; more wait their turn."""
    acme_retry_seconds: float = Field(60.0, ge=1.0, le=86_400.0)
    """The first wait after a failed order; doubled at each failure (jittered), up to 6 h."""

    @field_validator("acme_directory")
    @classmethod
    def _https_directory(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme != "https" or not parts.hostname or len(value) > 2048:
            raise ValueError("must be the CA's https:// directory URL")
        return value.strip()

    @field_validator("acme_email")
    @classmethod
    def _contact(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not re.fullmatch(r"[^@\s<>,;:]{1,64}@[A-Za-z0-9.-]{1,190}\.[A-Za-z]{2,63}", value):
            raise ValueError("must be an e-mail address (name@example.com)")
        return value

    # -- public hostnames and custom domains (issue 21 §2: platform/domains) ----------------
    apps_domain: str | None = Field(
        None,
        max_length=200,
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$",
    )
    """Each app also answers at ``<app>--<tenant>.<apps domain>`` (a wildcard DNS record points
    at the host); ``get_app_url`` lists that URL first. Lower case, no trailing dot."""
    apps_public_port: int | None = Field(None, ge=1, le=65535)
    """The port people reach the data plane's plain HTTP at under the apps domain and custom
    domains (80 behind a forwarder); default: the ingress port."""
    dns_resolver: str | None = Field(None, pattern=r"^[0-9A-Fa-f.:\[\]]{2,60}:[0-9]{1,5}$")
    """``host:port`` of the DNS server custom-domain TXT proofs are looked up at (tests);
    default: the system's resolvers."""
    domain_check_seconds: float = Field(60.0, ge=1.0, le=86_400.0)
    """How often pending custom domains' TXT records are looked up again (a bounded batch)."""
    domain_claim_ttl_seconds: float = Field(7 * 86_400.0, ge=60.0, le=365 * 86_400.0)
    """How long a custom domain's claim may stay unproved before it expires (the name is
    free for another app again): nobody squats a name by claiming it and never proving it."""
    domain_txt_grace_seconds: float = Field(3 * 86_400.0, ge=0.0, le=90 * 86_400.0)
    """How long a TXT-verified domain keeps being served after its record is found missing."""

    # -- issue 25 §2: apps on Kubernetes (runtime/kubernetes, docs/kubernetes.md) -------------
    runtime: Literal["local", "kubernetes"] = "local"
    """Where apps run: this host's processes (``local``) or a Kubernetes cluster
    (``kubernetes``: releases are built here and run there, their traffic through the cluster's
    Gateway; docs/kubernetes.md, "Serving with APPDECK_RUNTIME=kubernetes")."""
    kube_config: Path | None = None
    """A kubeconfig file. Unset: the pod's service account when AppDeck runs in the cluster
    (``KUBERNETES_SERVICE_HOST`` is set), else ``$KUBECONFIG`` or ``~/.kube/config``."""
    kube_context: str | None = None
    """The kubeconfig context; default: its current one."""
    kube_image: str | None = None
    """The base image every release runs in (required with ``kubernetes``)."""
    kube_source_url: str | None = None
    """AppDeck as the cluster's pods reach it, for the workspace download (required with
    ``kubernetes``): ``http://appdeck.appdeck-system.svc:8080``."""
    kube_namespace_mode: Literal["tenant", "shared"] = "tenant"
    """A namespace per tenant (``<namespace>-t-<tenant>``), or every app in ``namespace``."""
    kube_namespace: str = "appdeck"
    kube_gateway: str = "appdeck-gateway/appdeck"
    """The Gateway the apps' HTTPRoutes attach to, ``<namespace>/<name>``."""
    kube_gateway_pods_namespace: str | None = None
    """Where the Gateway's proxy pods run, when not in its namespace (Envoy Gateway:
    ``envoy-gateway-system``): the apps' NetworkPolicy admits traffic from there only."""
    kube_metrics_url: str | None = None
    """The gateway's Prometheus text endpoint (Envoy's ``/stats/prometheus``) the canary's
    per-backend 5xx are read from; unset: a canary sees no requests and passes on health."""


class InvalidSetting(Exception):
    """A setting has a value that cannot be used; ``str()`` is one line for a person."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid setting {name}: {reason}")
        self.name = name
        self.reason = reason


def load(**overrides: Any) -> Settings:
    """The settings from the environment with ``overrides`` (the CLI's options) on top.

    Raises :class:`InvalidSetting` for the first bad value, naming its ``APPDECK_*`` variable.
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "?"
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise InvalidSetting(_env_name(field), reason) from None
    except SettingsError as exc:  # a value pydantic-settings itself could not decode
        found = re.search(r'field "([^"]+)"', str(exc))
        field = found.group(1) if found else "?"
        raise InvalidSetting(_env_name(field), "cannot be parsed") from None


def _env_name(field: str) -> str:
    if field.isupper():  # an alias such as APP_VERSION is already the variable's name
        return field
    return f"APPDECK_{field.upper()}"


def _split(value: Any, separator: str) -> Any:
    """``"a<sep>b"`` -> ``["a", "b"]`` (blanks dropped); a JSON list is taken as it is."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError:
            raise ValueError(
                f"starts with '[' but is not a JSON list; write values separated by "
                f"{separator!r} instead"
            ) from None
    return [part.strip() for part in text.split(separator) if part.strip()]
