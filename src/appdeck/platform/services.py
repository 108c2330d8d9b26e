"""The platform's services, built together (the composition root makes one)."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.ingress.hosts import HostMap
from appdeck.model import hostnames
from appdeck.platform.advice.service import AdviceService
from appdeck.platform.apis.client import AppHttp
from appdeck.platform.apis.services import ApiServices
from appdeck.platform.apis.shares import OutboundLimits
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.ci.gate import CIGate
from appdeck.platform.ci.runner import SandboxRunner
from appdeck.platform.ci.service import CIService, DeployCommit
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import states
from appdeck.platform.deploy.deployments import Deployments
from appdeck.platform.deploy.engine import DeployEngine
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.platform.deploy.preflight import PreflightService
from appdeck.platform.deploy.watch import NOT_WATCHED, DeployWatcher
from appdeck.platform.domains import AppUrls, DnsTxtResolver, DomainService, NoTls, TlsStatus
from appdeck.platform.env import EnvService
from appdeck.platform.health import HealthService
from appdeck.platform.imports.service import ImportService
from appdeck.platform.logs import LogService
from appdeck.platform.oauth_clients import AppClientService
from appdeck.platform.pushes import CommitDeploys, PushPolicy
from appdeck.platform.quotas import Limits
from appdeck.platform.repos.git import Git
from appdeck.platform.repos.hosted import HostedLimits, HostedRepos
from appdeck.platform.repos.hosting import HostedService
from appdeck.platform.repos.inline import InlineLimits
from appdeck.platform.repos.prune import kept_commits
from appdeck.platform.repos.service import REPLAY_WINDOW_S, RepoService
from appdeck.platform.repos.sources import RepoSources
from appdeck.platform.routing import AppRoutes
from appdeck.platform.sources import SourceRoots
from appdeck.platform.tables.databases import AppDatabases
from appdeck.platform.tables.records_service import RecordService
from appdeck.platform.tables.schema_service import TableService
from appdeck.platform.workspace_tars import DEFAULT_MAX_MB, WorkspaceTars
from appdeck.runtime.disks import AppDisks
from appdeck.runtime.driver import Driver
from appdeck.runtime.egress import EgressPolicy
from appdeck.runtime.sandbox import Sandbox
from appdeck.storage.apps import AppRecord, AppStore
from appdeck.storage.ci import CIStore
from appdeck.storage.deployments import DeploymentStore
from appdeck.storage.domains import DomainStore
from appdeck.storage.identity import IdentityStore
from appdeck.storage.oauth import OAuthStore
from appdeck.storage.repos import RepoStore
from appdeck.storage.webhook_deliveries import WebhookDeliveries


@dataclass(frozen=True, slots=True)
class PlatformConfig:
    data_dir: Path
    secret_key: str | None
    source_roots: list[Path]
    """As configured (``{tenant}`` unexpanded, empty for the default): see ``SourceRoots``."""
    max_apps_per_tenant: int
    ingress_host: str
    ingress_port: int
    egress_allow: tuple[IPv4Network | IPv6Network, ...] = ()
    """Internal networks git may fetch from besides public addresses (``APPDECK_EGRESS_ALLOW``)."""
    webhook_replay_window_s: float = REPLAY_WINDOW_S
    """How long a webhook delivery is remembered against replays."""
    outbound: OutboundLimits = field(default_factory=OutboundLimits)
    """test_api and discover_apis: the pool and each tenant's share (``APPDECK_OUTBOUND_*``)."""
    limits: Limits = field(default_factory=Limits)
    """The operator's ceilings per app and quotas per tenant."""
    hosted: HostedLimits | None = None
    """Each app's hosted git repository (``/git/...``, inline files); None: off."""
    inline: InlineLimits = field(default_factory=InlineLimits)
    base_url: str = ""
    """The control plane's public URL: where the apps' git remotes are."""
    apps_domain: str | None = None
    """``APPDECK_APPS_DOMAIN``: apps also answer at ``<app>--<tenant>.<apps domain>``."""
    apps_public_port: int | None = None
    dns_resolver: str | None = None
    """``host:port`` custom domains' TXT proofs are looked up at (default: the system's)."""
    domain_check_seconds: float = 60.0
    domain_claim_ttl_seconds: float = 7 * 86_400.0
    domain_txt_grace_seconds: float = 3 * 86_400.0
    reserved_hosts: tuple[str, ...] = ()
    """The platform's own hostnames (the control plane's public URL): never a custom domain."""
    max_source_mb: int = DEFAULT_MAX_MB
    """The largest prepared workspace served to a pod (``/internal/.../workspace.tar``)."""
    gateway: bool = False
    """A cluster's gateway carries the apps' traffic (``APPDECK_RUNTIME=kubernetes``): an app
    answers at its apps-domain host only (no ``.localhost`` URL on this host's ingress), and
    keeps its name (its Services and HTTPRoute are named after it)."""

    def url_of(self, app_name: str, tenant: str) -> str:
        """Where the app is served (the hostname rule is :mod:`appdeck.model.hostnames`)."""
        return hostnames.url(app_name, tenant, self.ingress_port)

    def urls(self, tls: TlsStatus | None = None) -> AppUrls:
        """Where apps answer, the public URL first (``platform/domains/urls.py``)."""
        return AppUrls(
            self.ingress_port,
            self.apps_domain,
            self.apps_public_port,
            tls or NoTls(),
            local=not self.gateway,
        )


@dataclass(frozen=True, slots=True)
class HostResources:
    """What this host lends the platform besides the runtime driver, named rather than read
    off the driver: the app sandbox (git and hosted repositories run in it; None: they run
    as the server's user) and each app's disk (hosted repositories live on it when the
    kernel limits it; None: not counted)."""

    sandbox: Sandbox | None = None
    disks: AppDisks | None = None


@dataclass(frozen=True, slots=True)
class Platform:
    """The services every adapter (MCP tools, resources and prompts, the CLI, a web page)
    calls. Adapters reach nothing else: no driver, router, store or config. ``deploys`` is
    the deploy engine itself, for the composition root and the benchmarks."""

    feed: ChangeFeed
    apps: AppService
    env: EnvService
    deployments: Deployments
    preflight: PreflightService
    logs: LogService
    tables: TableService
    records: RecordService
    deploys: DeployEngine
    repos: RepoService
    ci: CIService
    oauth_clients: AppClientService
    apis: ApiServices
    """The API catalogue: keys, documents, test calls."""
    domains: DomainService
    """Custom domains: claims, proofs, the data plane's host map."""
    health: HealthService
    """Each app's health: the status resource, the CLI, the app series."""
    _driver: Driver
    _router: IngressRouter
    hosting: HostedService | None = None
    """Each app's git remote and inline files (None: APPDECK_HOSTED_REPOS off)."""
    workspaces: WorkspaceTars | None = None
    """Releases' prepared workspaces for their pods (None: the driver keeps none)."""

    @property
    def advice(self) -> AdviceService:
        """whats_next's service, over the services above (it holds no state of its own)."""
        return AdviceService(self.apps, self.deployments, self.repos, ci=self.ci)

    @property
    def imports(self) -> ImportService:
        """import_and_deploy's service, over the services above (no state of its own)."""
        return ImportService(
            self.apps, self.repos, self.preflight, self.deployments, hosting=self.hosting
        )

    @classmethod
    def build(
        cls,
        engine: AsyncEngine,
        identities: IdentityStore,
        config: PlatformConfig,
        *,
        driver: Driver,
        router: IngressRouter,
        instance_id: str,
        databases: AppDatabases,
        host: HostResources | None = None,
        hosts: HostMap | None = None,
        tls: TlsStatus | None = None,
        watcher: DeployWatcher = NOT_WATCHED,
    ) -> Platform:
        feed = ChangeFeed()
        sources = SourceRoots(config.source_roots, data_dir=config.data_dir)
        sealer = Sealer.from_settings(config.secret_key, config.data_dir)
        urls = config.urls(tls)
        domains = _domain_service(engine, config, hosts, sealer, urls, router)
        apps = _app_service(engine, identities, feed, sources, config, urls, domains)
        env = EnvService(apps, sealer, feed)
        deployments = DeploymentStore(engine, transitions=states.check)
        # Built in this order, each over what exists already (no setter after construction):
        # the repository's reads and CI's gate, then the engine, then CI (which deploys a
        # green commit), then the push policy over CI, then the repository service.
        git, hosted = _git_of(config, host or HostResources())
        repo_sources = RepoSources(
            RepoStore(engine),
            git,
            sealer,
            sources,
            hosted=hosted,
            keep=functools.partial(kept_commits, deployments),
        )
        ci_store = CIStore(engine)
        deploys = _deploy_engine(
            apps,
            env,
            deployments,
            driver,
            router,
            feed,
            sealer,
            sources,
            instance_id,
            watcher,
            git=repo_sources,  # a connected repository is the app's source
            gate=CIGate(ci_store),  # require_green
        )
        logs = LogService(apps, env, deployments, driver, sealer)
        deploying = Deployments(apps, deploys)
        commits = CommitDeploys(deploying, repo_sources.is_newest)
        ci = _ci_service(
            ci_store, apps, repo_sources, env, driver, logs, feed, instance_id, commits.number
        )
        repos = RepoService(
            apps,
            repo_sources,
            sealer,
            feed,
            on_commit=PushPolicy(ci, commits, repo_sources),
            deliveries=WebhookDeliveries(engine),
            replay_window_s=config.webhook_replay_window_s,
        )
        platform = cls(
            feed=feed,
            apps=apps,
            env=env,
            deployments=deploying,
            repos=repos,
            preflight=PreflightService(
                apps, env, sandboxed=driver.capabilities().own_network, repository=repo_sources.url
            ),
            logs=logs,
            tables=TableService(apps, databases, feed),
            records=RecordService(apps, databases),
            deploys=deploys,
            ci=ci,
            oauth_clients=AppClientService(apps, OAuthStore(engine)),
            apis=_api_services(engine, apps, repos, feed, router, config),
            domains=domains,
            health=_health_service(apps, deployments, deploys, router, feed, urls),
            _driver=driver,
            _router=router,
            hosting=HostedService(
                apps, repos, git, hosted, base_url=config.base_url, inline_limits=config.inline
            )
            if hosted is not None
            else None,
            workspaces=_workspaces_of(config, driver, sealer),
        )
        platform._follow_apps(hosted, databases, router)
        return platform

    def _follow_apps(
        self, hosted: HostedRepos | None, databases: AppDatabases, router: IngressRouter
    ) -> None:
        """What an app's delete and rename take with them, in order."""
        apps = self.apps
        if hosted is not None:
            apps.on_delete(lambda app: asyncio.to_thread(hosted.remove, app.id))
        apps.on_delete(lambda app: self.ci.cancel_all(app.id))  # before its workspaces go
        apps.on_delete(self._remove_app)
        apps.on_delete(lambda app: databases.drop(app.id))  # after its processes stopped
        apps.on_delete(lambda app: self.repos.forget(app.id))
        AppRoutes(apps, router).attach(self.feed)  # after: the processes stop, then the route
        apps.on_delete(self.domains.release_all)
        apps.on_rename(self.domains.moved)
        self.domains.attach(self.feed)  # a deploy (re)claims the spec's domains

    async def start(self, *, sole: bool = True) -> tuple[int, int]:
        """After a restart: load the API keys, route every app (404 until its live release is
        routed again), then end interrupted deployments and bring live releases back.
        ``sole``: no other replica shares the database (a deploy left in progress is nobody's:
        it ends now, not when its lease runs out)."""
        await self.apis.start()  # the ingress's API keys: it answers 503 until they are in
        await AppRoutes(self.apps, self._router).restore()
        await self.domains.resync()  # verified custom domains route to their apps
        done = await self.deploys.reconcile(sole=sole)
        await self.ci.start()  # runs a dead server process left unfinished end as errors
        self.repos.poller.start()  # repositories with poll_seconds
        return done

    async def shutdown(self, *, stop_apps: bool = False) -> None:
        """Wait for deploys under way, then let go of the apps: they keep running for the
        next start to adopt, unless ``stop_apps``."""
        await self.repos.poller.stop()
        await self.repos.settle()
        await self.ci.settle()
        await self.deployments.settle()
        if stop_apps:
            for release_id in await self._driver.releases():
                await self._driver.stop(release_id)
        await self._driver.detach()
        await self.apis.close()

    async def _remove_app(self, app: AppRecord) -> None:
        prefix = f"{app.id}-"
        for release_id in await self._driver.releases():
            if release_id.startswith(prefix):
                await self._driver.remove(release_id)
        await self._driver.remove_app(app.id)  # its disk (runtime/disks.py)


def _tls_of(urls: AppUrls, app: AppRecord) -> dict[str, Any] | None:
    """The certificate state of the app's public hostname (None: no public one)."""
    public = urls.public_host(app.name, app.tenant_id)
    return None if public is None else urls.tls.status_of(public)


def _domain_service(
    engine: AsyncEngine,
    config: PlatformConfig,
    hosts: HostMap | None,
    sealer: Sealer,
    urls: AppUrls,
    router: IngressRouter,
) -> DomainService:
    """Custom domains: claims, TXT proofs, the data plane's host map (served once ``router``
    says this host's data plane has it)."""
    return DomainService(
        DomainStore(engine),
        hosts if hosts is not None else HostMap(),
        apps=AppStore(engine),
        sealer=sealer,
        resolver=DnsTxtResolver(config.dns_resolver),
        urls=urls,
        reserved=config.reserved_hosts,
        recheck_seconds=config.domain_check_seconds,
        claim_ttl=config.domain_claim_ttl_seconds,
        txt_grace=config.domain_txt_grace_seconds,
        served=not config.gateway,
        published=router.edge_published,
    )


def _app_service(
    engine: AsyncEngine,
    identities: IdentityStore,
    feed: ChangeFeed,
    sources: SourceRoots,
    config: PlatformConfig,
    urls: AppUrls,
    domains: DomainService,
) -> AppService:
    return AppService(
        AppStore(engine),
        identities,
        feed,
        sources=sources,
        max_apps=config.max_apps_per_tenant,
        url_of=urls.primary,
        limits=config.limits,
        domains=domains,
        renames=not config.gateway,
    )


def _api_services(
    engine: AsyncEngine,
    apps: AppService,
    repos: RepoService,
    feed: ChangeFeed,
    router: IngressRouter,
    config: PlatformConfig,
) -> ApiServices:
    """The API catalogue and tests: keys checked by this host's data plane (``router``)."""
    return ApiServices.build(
        engine,
        apps,
        repos,
        feed,
        gate=router.keys,
        keys_published=router.keys_published,
        http=AppHttp(
            config.ingress_host,
            config.ingress_port,
            config.outbound,
            through_ingress=not config.gateway,
        ),
    )


def _health_service(
    apps: AppService,
    deployments: DeploymentStore,
    deploys: DeployEngine,
    router: IngressRouter,
    feed: ChangeFeed,
    urls: AppUrls,
) -> HealthService:
    return HealthService(
        apps,
        deployments,
        deploys.runtime,
        router.counters,
        feed,
        tls_of=functools.partial(_tls_of, urls),
    )


def _workspaces_of(config: PlatformConfig, driver: Driver, sealer: Sealer) -> WorkspaceTars | None:
    """Built workspaces served to pods, when the driver keeps them (the local driver's)."""
    source = getattr(driver, "workspace_tar", None)
    if source is None:
        return None
    return WorkspaceTars(sealer.mac, source, max_mb=config.max_source_mb)


def _git_of(config: PlatformConfig, host: HostResources) -> tuple[Git, HostedRepos | None]:
    """Git on local repositories (in the app's sandbox) and each app's hosted repository."""
    sandbox = host.sandbox
    git = Git(
        config.data_dir / "repos",
        policy=EgressPolicy(networks=config.egress_allow),
        sandbox=sandbox,
    )
    if config.hosted is None:
        return git, None
    hosted = HostedRepos(  # on each app's disk when disks are kernel-backed
        config.data_dir / "hosted",
        sandbox,
        config.hosted,
        disks=host.disks,
    )
    return git, hosted


def _deploy_engine(
    apps: AppService,
    env: EnvService,
    deployments: DeploymentStore,
    driver: Driver,
    router: IngressRouter,
    feed: ChangeFeed,
    sealer: Sealer,
    sources: SourceRoots,
    instance_id: str,
    watcher: DeployWatcher,
    *,
    git: RepoSources,
    gate: CIGate,
) -> DeployEngine:
    """The deploy engine over the runtime ``driver`` and the data plane (``router``)."""
    return DeployEngine(
        apps,
        env,
        deployments,
        driver,
        router,
        feed,
        sealer,
        sources=sources,
        instance_id=instance_id,
        git=git,
        gate=gate,
        watcher=watcher,
    )


def _ci_service(
    store: CIStore,
    apps: AppService,
    repos: RepoSources,
    env: EnvService,
    driver: Driver,
    logs: LogService,
    feed: ChangeFeed,
    instance_id: str,
    deploy: DeployCommit,
) -> CIService:
    """CI: runs in the sandbox, their logs masked as the app's are; a green run with
    auto_deploy deploys through ``deploy``."""
    return CIService(
        apps,
        store,
        repos,
        env,
        SandboxRunner(driver),
        logs.masker,
        feed,
        deploy=deploy,
        instance_id=instance_id,
    )
