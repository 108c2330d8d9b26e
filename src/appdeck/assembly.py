"""Assembly of ``appdeck serve``'s parts from its settings: authentication, the OAuth
server, the event hub, the MCP server and the platform's configuration. The composition root,
:mod:`appdeck.app`, calls these in order."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from appdeck.auth.audit import AuditLog
from appdeck.auth.bearer import BearerAuthenticator, ClaimNames, LocalJwtVerifier
from appdeck.auth.external import JwksVerifier
from appdeck.auth.keys import ALGORITHM, SigningKeys
from appdeck.auth.server import AuthorizationServer
from appdeck.auth.server.pending import TRIM_EVERY
from appdeck.auth.tokens import TokenIssuer, TokenVerifier
from appdeck.auth.urls import PublicUrls
from appdeck.events.bus import InProcessBus, RedisBus
from appdeck.events.cluster import Cluster
from appdeck.events.leases import RedisLeases
from appdeck.events.redis_log import RedisEventLog
from appdeck.observability.deploys import DeployMetrics
from appdeck.observability.mcp import McpMetrics, count_sessions
from appdeck.observability.storage import count_leases, watch_database, watch_redis
from appdeck.observability.tracing import Tracing
from appdeck.platform.apis.shares import OutboundLimits
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy.watch import DeployWatcher, FanOut
from appdeck.platform.quotas import Limits
from appdeck.platform.repos.hosted import HostedLimits
from appdeck.platform.repos.inline import InlineLimits
from appdeck.platform.services import Platform, PlatformConfig
from appdeck.prompts import register_all as register_prompts
from appdeck.protocol.registry import Registry
from appdeck.protocol.server import McpServer, ServerInfo
from appdeck.protocol.sessions import SessionManager
from appdeck.protocol.task_model import TaskLimits
from appdeck.protocol.tasks import TaskManager
from appdeck.resources.apps import register as register_app_resources
from appdeck.resources.tables import register as register_table_resources
from appdeck.settings import Settings
from appdeck.storage import Storage
from appdeck.storage.consents import ConsentStore
from appdeck.storage.identity import IdentityStore
from appdeck.storage.oauth import OAuthStore
from appdeck.storage.signing_keys import SigningKeyStore
from appdeck.tools import register_all as register_tools
from appdeck.transport.hub import StreamHub

log = logging.getLogger("appdeck")
SESSION_RECHECK_SECONDS = 5.0
"""Replica mode: a cached session is re-read from the store at most this long after its last
read (the backstop for a lost invalidation)."""


def public_urls(settings: Settings, base_url: str) -> PublicUrls:
    """``base_url`` and, when no public URL is set, its other loopback spellings."""
    return PublicUrls.build(base_url, loopback_aliases=not settings.public_url)


async def authentication(
    settings: Settings,
    base_url: str,
    identities: IdentityStore,
    storage: Storage,
    cluster: Cluster,
) -> tuple[SigningKeys | None, TokenIssuer | None, BearerAuthenticator]:
    """The embedded authorization server's keys and issuer (unless an external IdP is set),
    and the resource server's bearer authenticator."""
    resource = f"{base_url}/mcp"
    audience = settings.audience or resource
    keys: SigningKeys | None = None
    issuer: TokenIssuer | None = None
    if settings.external_idp:
        assert settings.issuer is not None
        assert settings.jwks_url is not None
        verifier: JwksVerifier | LocalJwtVerifier = JwksVerifier(
            jwks_url=settings.jwks_url,
            issuer=settings.issuer,
            audience=audience,
            algorithms=settings.jwt_algorithms,
            refetch_after=settings.jwks_refetch_seconds,
        )
    else:
        if cluster.shared:  # replicas: the keys in the database, sealed with the secret key
            keys = await SigningKeys.shared(
                SigningKeyStore(storage.engine),
                Sealer.from_settings(settings.secret_key, settings.data_dir),
            )
        else:
            keys = SigningKeys.load_or_create(settings.data_dir)
        issuer = TokenIssuer(keys, base_url, resource, settings.access_token_ttl_seconds)
        verifier = LocalJwtVerifier(
            TokenVerifier(keys.public_set, base_url, audience, [ALGORITHM]).verify,
            keys.refresh_for,
        )
    bearer = BearerAuthenticator(
        verifier=verifier,
        identities=identities,
        resource_metadata_url=f"{base_url}/.well-known/oauth-protected-resource",
        claims=ClaimNames(tenant=settings.tenant_claim, user=settings.user_claim),
        trust_seconds=settings.auth_trust_seconds,
        broadcast=cluster.broadcast if cluster.shared else None,
    )
    await bearer.start()  # revoked jti read; other replicas' revocations heard
    return keys, issuer, bearer


def authorization_server(
    settings: Settings,
    base_url: str,
    storage: Storage,
    identities: IdentityStore,
    keys: SigningKeys | None,
    token_issuer: TokenIssuer | None,
    bearer: BearerAuthenticator,
    audit: AuditLog,
) -> AuthorizationServer | None:
    """The embedded OAuth server, unless an external IdP issues the tokens."""
    if keys is None or token_issuer is None:
        return None
    return AuthorizationServer(
        base_url,
        f"{base_url}/mcp",
        token_issuer,
        keys,
        identities,
        OAuthStore(storage.engine),
        bearer.revoke_jti,
        audit,
        settings,
        forget_pat=bearer.forget_pat,
        urls=public_urls(settings, base_url),
        consents=ConsentStore(storage.engine, trim_every=TRIM_EVERY),
    )


def hub_of(settings: Settings, storage: Storage, cluster: Cluster) -> StreamHub:
    """The event log, live bus and stream leases: the database and this process, or (replica
    mode) Redis streams, doorbells and leases that every replica shares."""
    if cluster.redis is None:
        return StreamHub(storage.events, InProcessBus())
    return StreamHub(
        RedisEventLog(
            cluster.redis, cluster.prefix, retention_seconds=settings.event_retention_seconds
        ),
        RedisBus(cluster.broadcast),
        RedisLeases(cluster.redis, cluster.prefix, ttl_seconds=settings.stream_lease_seconds),
    )


def register_everything(settings: Settings, registry: Registry, platform: Platform) -> None:
    """Every tool, resource and prompt (and the conformance suite's, when asked for)."""
    register_tools(registry, platform)
    register_app_resources(registry, platform)
    register_table_resources(registry, platform)
    register_prompts(registry, platform)
    if settings.with_conformance_fixtures:
        from appdeck.fixtures.conformance import register as register_fixtures

        register_fixtures(registry)


def mcp_server_of(
    settings: Settings,
    *,
    storage: Storage,
    hub: StreamHub,
    registry: Registry,
    audit: AuditLog,
    cluster: Cluster,
    base_url: str,
    tracing: Tracing | None = None,
) -> tuple[McpServer, TaskManager]:
    """The protocol core: sessions, tasks and dispatch over the registry. In replica mode the
    sessions' caches and client-bound requests go through the cluster's broadcast; in one
    process there is nobody to tell (a local broadcast would only make a cancel for a finished
    call retry itself)."""
    broadcast = cluster.broadcast if cluster.shared else None
    instance_id = cluster.instance_id
    sessions = SessionManager(
        storage.sessions,
        idle_timeout=settings.session_idle_seconds,
        max_sessions=settings.max_sessions,
        max_per_user=settings.max_sessions_per_user,
        max_per_token=settings.max_sessions_per_token,
        broadcast=broadcast,
        instance_id=instance_id,
        recheck_seconds=SESSION_RECHECK_SECONDS if cluster.shared else None,
    )
    tasks = TaskManager(
        storage.tasks,
        hub,
        instance_id=instance_id,
        limits=TaskLimits(
            default_ttl_ms=settings.task_default_ttl_ms,
            max_ttl_ms=settings.task_max_ttl_ms,
            default_poll_ms=settings.task_poll_ms,
        ),
    )
    server: McpServer

    def served() -> tuple[str, ...]:
        return (*server.rpc, *server.stateless_rpc)

    # what the server serves bounds the metric labels (and span names); read at the first
    # request, when the server below exists and every tool is registered
    telemetry = McpMetrics(served, registry.tools.keys)
    count_sessions(lambda: len(sessions.live()))
    server = McpServer(
        registry=registry,
        sessions=sessions,
        tasks=tasks,
        outbox=hub,
        info=ServerInfo(version=settings.app_version),
        client_request_timeout=settings.client_request_timeout,
        audit=audit,
        resource_metadata_url=f"{base_url}/.well-known/oauth-protected-resource",
        broadcast=broadcast,
        instance_id=instance_id,
        # every replica shares APPDECK_SECRET_KEY, so any one verifies another's requestState
        state_key=bytes.fromhex(
            Sealer.from_settings(settings.secret_key, settings.data_dir).mac("mcp request state")
        ),
        telemetry=telemetry,
        tracing=tracing.requests(served, registry.tools.keys) if tracing is not None else None,
    )
    return server, tasks


def deploy_watcher(tracing: Tracing | None) -> DeployWatcher:
    """What the deploy engine tells of its runs: the deploy series, and the traces when on."""
    if tracing is None:
        return DeployMetrics()
    return FanOut([DeployMetrics(), tracing.deploys()])


def platform_config(settings: Settings, ingress_port: int, base_url: str) -> PlatformConfig:
    """With ``APPDECK_RUNTIME=kubernetes``, apps answer at the Gateway's hosts only:
    ``<app>--<tenant>.<APPDECK_APPS_DOMAIN>`` (``localhost`` unset, as the HTTPRoutes say) on
    ``APPDECK_APPS_PUBLIC_PORT`` (80 unset)."""
    gateway = settings.runtime == "kubernetes"
    return PlatformConfig(
        data_dir=settings.data_dir,
        secret_key=settings.secret_key,
        source_roots=settings.source_roots,
        max_apps_per_tenant=settings.max_apps_per_tenant,
        ingress_host=settings.host,
        ingress_port=ingress_port,
        egress_allow=tuple(settings.egress_allow),
        webhook_replay_window_s=settings.webhook_replay_window_s,
        outbound=OutboundLimits(
            settings.outbound_connections, settings.outbound_per_tenant, settings.outbound_wait_s
        ),
        limits=limits_of(settings),
        hosted=HostedLimits(
            settings.hosted_max_push_bytes,
            settings.hosted_max_repo_bytes,
            settings.hosted_timeout_s,
            settings.hosted_max_pushes_per_app,
        )
        if settings.hosted_repos
        else None,
        inline=InlineLimits(settings.inline_max_files, settings.inline_max_bytes),
        base_url=base_url,
        apps_domain=settings.apps_domain or ("localhost" if gateway else None),
        apps_public_port=settings.apps_public_port or (80 if gateway else None),
        dns_resolver=settings.dns_resolver,
        domain_check_seconds=settings.domain_check_seconds,
        domain_claim_ttl_seconds=settings.domain_claim_ttl_seconds,
        domain_txt_grace_seconds=settings.domain_txt_grace_seconds,
        reserved_hosts=tuple(
            h for h in [urlsplit(settings.public_url or "").hostname] if h is not None
        ),
        max_source_mb=settings.max_source_mb,
        gateway=gateway,
    )


def limits_of(settings: Settings) -> Limits:
    """The operator's ceilings and tenant quotas (``APPDECK_MAX_*``, ``APPDECK_TENANT_*``)."""
    return Limits(**{f: getattr(settings, f) for f in Limits.__dataclass_fields__})


def observe_storage(storage: Storage, cluster: Cluster, hub: StreamHub, platform: Platform) -> None:
    """The storage series (:mod:`appdeck.observability.storage`) read from the parts built:
    the database's statements and pool, Redis's pool (its commands are timed by the client
    class :meth:`Cluster.connect` was given), and the leases held here."""
    watch_database(storage.engine)
    if cluster.redis is not None:
        watch_redis(cluster.redis)
    count_leases("app", platform.deploys.locks.held)
    count_leases("stream", lambda: hub.leases_held)
    hosting = platform.hosting
    count_leases("push", hosting.pushes_under_way if hosting is not None else lambda: 0)
