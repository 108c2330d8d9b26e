"""The composition root: builds every part from the settings and wires them together.

Nothing else constructs stores, buses or servers; tests use :meth:`Services.start` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.routing import BaseRoute

from appdeck import runtime_setup as setup
from appdeck import serving
from appdeck.assembly import (
    authentication,
    authorization_server,
    deploy_watcher,
    hub_of,
    mcp_server_of,
    observe_storage,
    platform_config,
    public_urls,
    register_everything,
)
from appdeck.auth import Authenticator
from appdeck.auth.audit import AuditLog
from appdeck.auth.bearer import BearerAuthenticator
from appdeck.auth.keys import SigningKeys
from appdeck.auth.ratelimit import RateLimiter, RedisRateLimiter, TokenBuckets
from appdeck.auth.server import AuthorizationServer
from appdeck.auth.server.metadata import protected_resource
from appdeck.auth.throttle import MCP_WINDOW, FailureThrottle
from appdeck.auth.tokens import TokenIssuer
from appdeck.auth.urls import PublicUrls
from appdeck.console import console_routes
from appdeck.console.context import AccountPorts, Console
from appdeck.console.live import LiveChanges
from appdeck.console.sessions import ConsoleSessions
from appdeck.events.cluster import Cluster
from appdeck.events.leases import RedisLeases
from appdeck.ingress.haproxy.joined import JoinedEdge
from appdeck.ingress.haproxy.plane import HAProxyDataPlane
from appdeck.observability.apps import follow as follow_app_series
from appdeck.observability.storage import watch_replicas
from appdeck.observability.tracing import Tracing, tracing_of
from appdeck.platform.changes import Change
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.platform.services import HostResources, Platform
from appdeck.platform.tables.databases import AppDatabases
from appdeck.platform.tls import TlsService
from appdeck.platform.tls.states import TlsStates
from appdeck.protocol.registry import Registry
from appdeck.protocol.server import McpServer
from appdeck.protocol.tasks import TaskManager
from appdeck.resources.apps import changed as changed_resources
from appdeck.resources.apps import revoked as revoked_resources
from appdeck.runtime.install import InstallLock
from appdeck.settings import Settings
from appdeck.storage import Storage
from appdeck.storage.audit import AuditStore
from appdeck.storage.console_sessions import ConsoleSessionStore
from appdeck.storage.identity import IdentityStore
from appdeck.storage.oauth import OAuthStore
from appdeck.storage.replicas import ReplicaStore
from appdeck.tls_setup import tls_of
from appdeck.transport.git_hooks import git_hook_route
from appdeck.transport.git_remote import git_remote_route
from appdeck.transport.guard import Guard
from appdeck.transport.hub import StreamHub
from appdeck.transport.landing import landing_route
from appdeck.transport.mcp_http import HttpSettings, McpHttpApp
from appdeck.transport.responses import ASGIApp
from appdeck.transport.routes import Router, control_plane, json_route
from appdeck.transport.security import LOOPBACK_HOSTS, HostPolicy
from appdeck.transport.spellings import SpelledChallenges
from appdeck.transport.workspace_tar import workspace_tar_route

if TYPE_CHECKING:
    pass

log = logging.getLogger("appdeck")
DEPLOY_WATCH_SECONDS = 5.0
PUSH_LEASE_MARGIN_S = 30.0
"""A push's lease outlives its time limit by this much (a dead replica's runs out after it)."""
"""How often a replica ends deployments nobody drives and re-syncs its routes."""


async def _cluster_of(settings: Settings) -> Cluster:
    """Redis shared with the other replicas when set (replica mode: the only mode that loads
    redis-py, see ``common.outages``), else this process alone."""
    if not settings.redis_url:
        return Cluster.alone()
    from appdeck.observability.timed_redis import TimedRedis

    return await Cluster.connect(settings.redis_url, settings.redis_prefix, client=TimedRedis)


def _audit_log(settings: Settings) -> AuditLog:
    """The audit log, started: its own thread and connection."""
    audit = AuditLog(
        AuditStore.opener(settings.database()),
        dead_letter=settings.data_dir / "audit-dead-letter.jsonl",
    )
    audit.start()
    return audit


async def _console_of(services: Services) -> Console | None:
    """The console, when the embedded authorization server signs people in (an external
    IdP's users have no password here: the console then is not served)."""
    authz, platform, bearer = services.authorization_server, services.platform, services.bearer
    if authz is None or platform is None or bearer is None:
        return None
    live = LiveChanges(services.cluster.broadcast)
    await live.start()
    platform.feed.subscribe(live.publish)
    return Console(
        platform=platform,
        identities=services.identities,
        sessions=ConsoleSessions(ConsoleSessionStore(services.storage.engine), services.identities),
        live=live,
        audit=services.audit,
        audit_store=services.audit_store,
        check_credentials=authz.check_credentials,
        secure=services.base_url.startswith("https://"),
        mcp_url=f"{services.base_url}/mcp",
        account=AccountPorts(
            oauth=OAuthStore(services.storage.engine),
            mcp_sessions=services.server.sessions.owned_sessions,
            end_mcp_session=services.server.sessions.end_owned,
            revoke_jti=bearer.revoke_jti,
            forget_pat=bearer.forget_pat,
        ),
    )


@dataclass
class Services:
    settings: Settings
    storage: Storage
    hub: StreamHub
    server: McpServer
    registry: Registry
    authenticator: Authenticator
    instance_id: str
    base_url: str
    identities: IdentityStore
    audit: AuditLog
    audit_store: AuditStore
    cluster: Cluster
    replicas: ReplicaStore | None = None
    keys: SigningKeys | None = None
    token_issuer: TokenIssuer | None = None
    bearer: BearerAuthenticator | None = None
    authorization_server: AuthorizationServer | None = None
    platform: Platform | None = None
    ingress: HAProxyDataPlane | None = None
    databases: AppDatabases | None = None
    router: IngressRouter | None = None
    served: setup.Served | None = None  # the driver, router, data plane and edge, together
    port: int = 0
    install: InstallLock | None = None  # the hold on its install's uids, released at stop
    tls: TlsService | None = None  # automatic TLS (issue 21 §3), when set
    tls_states: TlsStates | None = None  # its orders' states, read by get_app_url
    tracing: Tracing | None = None  # traces, when an OTLP endpoint is set
    console: Console | None = None  # the console (issue 24), with the embedded sign-in
    _background: list[asyncio.Task[None]] = field(default_factory=list, repr=False)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @classmethod
    async def start(
        cls,
        settings: Settings,
        *,
        authenticator: Authenticator | None = None,
        port: int = 0,
        tracing: Tracing | None = None,
    ) -> Services:
        """Build and start every part. ``tracing``: traces go there rather than where the
        settings say (tests give one with an in-memory exporter); it is shut down at stop."""
        serving.refuse_before_opening(settings)
        kube = await serving.cluster_of(settings)  # a cluster that does not answer: before opening
        runtime, install = setup.sandbox_of(settings)
        storage = await Storage.open(settings.database())
        cluster = await _cluster_of(settings)
        base_url = settings.base_url(port)
        identities = IdentityStore(storage.engine)
        audit_store = AuditStore(storage.engine)
        audit = _audit_log(settings)
        keys, token_issuer, bearer = await authentication(
            settings, base_url, identities, storage, cluster
        )
        authz = authorization_server(
            settings, base_url, storage, identities, keys, token_issuer, bearer, audit
        )
        hub = hub_of(settings, storage, cluster)
        registry = Registry()
        instance_id = cluster.instance_id
        disks = setup.disks_of(settings, runtime)
        databases = await serving.app_databases(settings, runtime, disks)
        served, built = await serving.served(
            settings, runtime, kube, disks=disks, databases=databases, control_port=port
        )
        ingress, router = served.ingress, served.router
        ingress_port = await ingress.start() if ingress is not None else 0
        tls_states = TlsStates(acme=bool(settings.acme_directory))  # filled once TLS starts
        tracing = tracing or tracing_of(settings.otlp_endpoint)
        platform = Platform.build(
            storage.engine,
            identities,
            platform_config(settings, ingress_port, base_url),
            driver=served.driver,
            host=HostResources(runtime, disks),
            router=router,
            instance_id=instance_id,
            databases=databases,
            hosts=router.table.hosts,  # custom domains the data plane serves
            tls=setup.served_certificates(settings, ingress, tls_states),  # served + order state
            watcher=deploy_watcher(tracing),
        )
        built(platform)
        if cluster.redis is not None and platform.hosting is not None:  # one push limit for all
            limit = platform.hosting.limits.timeout_s + PUSH_LEASE_MARGIN_S
            platform.hosting.leases = RedisLeases(cluster.redis, cluster.prefix, ttl_seconds=limit)
        observe_storage(storage, cluster, hub, platform)
        register_everything(settings, registry, platform)
        server, tasks = mcp_server_of(
            settings,
            storage=storage,
            hub=hub,
            registry=registry,
            audit=audit,
            cluster=cluster,
            base_url=base_url,
            tracing=tracing,
        )
        await server.start()
        services = cls(
            settings=settings,
            storage=storage,
            hub=hub,
            server=server,
            registry=registry,
            authenticator=authenticator or bearer,
            instance_id=instance_id,
            base_url=base_url,
            identities=identities,
            audit=audit,
            audit_store=audit_store,
            cluster=cluster,
            keys=keys,
            token_issuer=token_issuer,
            bearer=bearer,
            authorization_server=authz,
            platform=platform,
            ingress=ingress,
            databases=databases,
            router=router,
            served=served,
            port=port,
            install=install,
            tls_states=tls_states,
            tracing=tracing,
        )
        services.console = await _console_of(services)
        await services._begin(platform, router, tasks)
        return services

    async def _begin(self, platform: Platform, router: IngressRouter, tasks: TaskManager) -> None:
        """Once every part is built: restore the apps, join the other replicas (routes,
        heartbeat, tasks) and start the background loops."""
        platform.feed.subscribe(self._announce)
        interrupted, restored = await platform.start(sole=not self.cluster.shared)
        if self.cluster.shared:  # after start: its restore unroutes every app, for this table only
            await router.share(
                self.cluster.broadcast,
                self.instance_id,
                missed=lambda: platform.deploys.resync_routes(router),
                redis=self.cluster.redis,
                prefix=self.cluster.prefix,
            )
            await platform.deploys.resync_routes(router)
            await platform.deploys.cancels.attach(self.cluster.broadcast)  # cancels sent elsewhere
        if self.ingress is not None:  # every route is restored now: HAProxy may follow
            self.ingress.settle()
        if interrupted or restored:
            log.warning(
                "after restart: %d interrupted deployment(s) failed, %d live app(s) restored",
                interrupted,
                restored,
            )
        if self.cluster.shared:  # replica mode: live from now on (before any task of ours exists)
            self.replicas = ReplicaStore(self.storage.engine, self.instance_id)
            watch_replicas(self.replicas)
            await self.replicas.heartbeat()
            beat = self.replicas.beat_forever(self._stopping)
            self._background.append(asyncio.create_task(beat, name="heartbeat"))
        await self._start_tls()
        if self.edge is not None:  # issue 21: keys, TLS, hosts loaded now
            await self.edge.start()  # (the mirror copies exactly what it is given)
        if self.served is not None and self.served.watch is not None:  # a cluster's pods
            watching_runtime = self.served.watch(self._stopping)
            self._background.append(asyncio.create_task(watching_runtime, name="runtime"))
        await tasks.attach(self.cluster.broadcast)
        reconciled = await tasks.reconcile({})
        if reconciled:
            log.warning("reconciled %d task(s) left working by a previous process", reconciled)
        self._background.append(asyncio.create_task(self._sweep_forever(), name="sweeper"))
        await platform.health.refresh()  # the app series' catalogue, before the first scrape
        follow_app_series(platform.health, self.settings.metrics_app_labels)
        sampling = platform.health.run_forever(self._stopping)
        self._background.append(asyncio.create_task(sampling, name="health"))
        watching = self._watch_deploys(router)
        self._background.append(asyncio.create_task(self._check_domains(), name="domains"))
        self._background.append(asyncio.create_task(watching, name="deploy-watch"))
        watch = tasks.watch(self._stopping)  # rechecks (2 s) and the orphan sweep
        self._background.append(asyncio.create_task(watch, name="tasks-watch"))
        if self.settings.with_conformance_fixtures:
            from appdeck.fixtures.conformance import tick_watched_resource

            ticker = tick_watched_resource(self.server.resources.updated, self._stopping)
            self._background.append(asyncio.create_task(ticker, name="watched-resource"))
            from appdeck.fixtures.stateless import triggers

            for tool in triggers(self.server.listen):  # they need the server's listen hub
                self.registry.add_tool(tool)

    async def _start_tls(self) -> None:
        """Automatic TLS when set (docs/tls.md): the stored certificates into the data plane
        before traffic, then its loop (challenges followed every second, certificates loaded,
        ordered and renewed every few seconds)."""
        if self.ingress is None:
            return
        live = self.replicas.live if self.replicas is not None else None
        domains = self.platform.domains if self.platform is not None else None
        self.tls = tls_of(
            self.settings,
            self.storage.engine,
            self.ingress,
            self.instance_id,
            live,
            domains,
            states=self.tls_states,
            served=self.edge.sync if self.edge is not None else None,
        )
        if self.tls is None:
            return
        await self.tls.start()
        if self.cluster.shared:  # new challenges rung to every replica at once
            await self.tls.attach(self.cluster.broadcast)
        self._background.append(
            asyncio.create_task(self.tls.run_forever(self._stopping), name="tls")
        )

    async def _announce(self, change: Change) -> None:
        """Platform changes become resource notifications, for the change's tenant only."""
        lost = revoked_resources(change)
        if lost is not None:
            await self.server.resources.unsubscribe_user(*lost)
        uris, listed = changed_resources(change)
        for uri in uris:
            await self.server.resources.updated(uri, tenant=change.tenant_id)
        if listed:
            await self.server.resources.list_changed(tenant=change.tenant_id)

    async def _sweep_forever(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.sweep_seconds):
                    await self._stopping.wait()
            if self._stopping.is_set():
                return
            try:
                await self.sweep()
            except Exception:
                log.exception("sweep failed")

    async def _watch_deploys(self, router: IngressRouter) -> None:
        """Every few seconds: end deployments whose replica died (their app's lease ran out),
        apply the stops and starts the operator's CLI recorded, and, in replica mode, route
        every settled app as the database says (the backstop of the ``routes`` messages)."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DEPLOY_WATCH_SECONDS):
                    await self._stopping.wait()
            if self._stopping.is_set() or self.platform is None:
                return
            try:
                await self.platform.deploys.reclaim()
                await self.platform.deploys.apply_intents()  # `appdeck app stop|start`
                if self.cluster.shared:
                    await self.platform.deploys.resync_routes(router)
                await self.platform.domains.resync()  # custom domains, as the database says
            except Exception:
                log.exception("deploy watch failed")

    async def _check_domains(self) -> None:
        """Every ``APPDECK_DOMAIN_CHECK_SECONDS``: look a bounded batch of pending custom
        domains' TXT proofs up again (each lookup bounded in time)."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.domain_check_seconds):
                    await self._stopping.wait()
            if self._stopping.is_set() or self.platform is None:
                return
            try:
                await self.platform.domains.recheck()
            except Exception:
                log.exception("custom domain check failed")

    async def sweep(self) -> None:
        """Expire idle sessions and old tasks, trim the event log, note token use."""
        await self.server.sessions.sweep()
        if self.bearer is not None:
            await self.bearer.flush_usage()
            await self.identities.purge_revocations(time.time())
        if self.authorization_server is not None:
            await self.authorization_server.cleanup()
        if self.keys is not None:
            await self.keys.refresh()  # shared keys: a rotation made elsewhere
        await self.server.tasks.expire()
        if self.console is not None:
            await self.console.sessions.purge()
        await self.storage.events.trim(time.time() - self.settings.event_retention_seconds)

    async def stop(self, *, stop_apps: bool = False) -> None:
        """Stop the server. Apps keep running for the next start to adopt, unless
        ``stop_apps`` (tests, ``appdeck serve --stop-apps-on-exit``)."""
        self.drain()
        # background loops stop between database writes; cancelling one mid-write would leave
        # a transaction open on a pooled connection
        self._stopping.set()
        for task in self._background:
            try:
                async with asyncio.timeout(30):
                    await task
            except TimeoutError:
                task.cancel()
        await self.server.tasks.shutdown()
        if self.replicas is not None:  # the others sweep our tasks now, not in 10 s
            with contextlib.suppress(Exception):
                await self.replicas.remove()
        with contextlib.suppress(Exception):
            await self.sweep()
        if self.platform is not None:
            await self.platform.shutdown(stop_apps=stop_apps)  # else apps keep running
        if self.edge is not None:
            await self.edge.stop()
        if self.ingress is not None:  # HAProxy outlives serve, unless the apps stop too
            await self.ingress.stop(haproxy=stop_apps)
        if self.router is not None:
            await self.router.close()
        if self.served is not None:
            await self.served.release()
        if self.databases is not None:
            await self.databases.close()
        if self.console is not None:
            await self.console.live.close()
        await self.audit.close()
        if self.bearer is not None:
            await self.bearer.close()
        await self.server.close()
        await self.cluster.close()
        await self.storage.close()
        if self.install is not None:
            self.install.release()
        if self.tracing is not None:  # last: the spans of the shutdown's own work go too
            await asyncio.to_thread(self.tracing.shutdown)

    def drain(self) -> None:
        """The server is about to stop serving: every ``subscriptions/listen`` stream ends
        with its response now (the spec's graceful closure), before the HTTP server waits
        for its connections to finish. The console's live streams end too."""
        self.server.listen.end_all()
        if self.console is not None:
            self.console.live.end_all()

    @property
    def edge(self) -> JoinedEdge | None:
        """HAProxy's edge (API keys, custom domains, TLS, the control plane); None when no
        data plane runs here (``APPDECK_RUNTIME=kubernetes``)."""
        return self.served.edge if self.served is not None else None

    @property
    def urls(self) -> PublicUrls:
        """The base URL and, without a public URL, its other loopback spellings."""
        return public_urls(self.settings, self.base_url)

    def policy(self) -> HostPolicy:
        s = self.settings
        hosts = {*LOOPBACK_HOSTS, s.host, *s.allowed_hosts}
        if s.public_url:
            hosts.add(urlsplit(s.public_url).hostname or "")
        return HostPolicy.build(hosts, s.allowed_origins)

    def asgi(self) -> ASGIApp:
        s = self.settings
        limiter: TokenBuckets = (
            RedisRateLimiter(
                self.cluster.redis,
                self.cluster.prefix,
                s.rate_limit_per_second,
                s.rate_limit_burst,
                lease_seconds=s.rate_limit_lease_seconds,
            )
            if self.cluster.redis is not None
            else RateLimiter(s.rate_limit_per_second, s.rate_limit_burst)
        )
        guard = Guard(
            self.authenticator,
            limiter=limiter,
            audit=self.audit,
            failures=FailureThrottle(free=s.auth_failures_per_ip, window=MCP_WINDOW),
        )
        mcp = McpHttpApp(
            self.server,
            self.hub,
            guard,
            self.policy(),
            HttpSettings(
                max_body_bytes=s.max_body_bytes,
                keepalive_seconds=s.keepalive_seconds,
                retry_ms=s.sse_retry_ms,
                stateless=s.stateless_era,
            ),
        )

        async def health() -> dict[str, object]:
            return {"status": "ok", "version": s.app_version, "instance": self.instance_id}

        routes: list[BaseRoute] = []
        if self.authorization_server is not None:
            routes += self.authorization_server.routes()
        else:  # external IdP: only the protected-resource metadata is ours to serve
            document = protected_resource(f"{self.base_url}/mcp", s.issuer or "")
            routes += [
                json_route("/.well-known/oauth-protected-resource", document),
                json_route("/.well-known/oauth-protected-resource/mcp", document),
            ]
        oauth = self.authorization_server is not None
        routes.append(landing_route(self.urls, s.app_version, oauth=oauth))
        if self.platform is not None:
            routes.append(git_hook_route(self.platform.repos))
            if self.platform.hosting is not None:  # each app's git remote (issue 21 §4)
                throttle = FailureThrottle(free=s.auth_failures_per_ip, window=MCP_WINDOW)
                routes.append(git_remote_route(self.platform.hosting, self.authenticator, throttle))
            if self.platform.workspaces is not None:  # a pod's source (docs/kubernetes.md)
                routes.append(workspace_tar_route(self.platform.workspaces))
        if self.console is not None:
            routes += console_routes(self.console)
        plane = control_plane(health, routes, metrics_token=s.metrics_token)
        app = SpelledChallenges(Router(mcp, plane), self.urls)
        return setup.behind_edge(app, self.edge)  # HAProxy's X-Forwarded-* believed
