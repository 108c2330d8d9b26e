"""The real platform services over a real database, with the runtime driver (its logs too) and
the router in memory (tests/platform/deploy/fakes.py): what the service tests and the tools' property test
drive. Nothing here starts a process."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from pathlib import Path

from appdeck.auth.admin import IdentityAdmin
from appdeck.common.identity import Principal
from appdeck.ingress.hosts import HostMap
from appdeck.ingress.keys import KeyGate
from appdeck.platform.apis.client import AppHttp
from appdeck.platform.apis.services import ApiServices
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.ci.gate import CIGate
from appdeck.platform.ci.service import CIService
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import states
from appdeck.platform.deploy.deployments import Deployments
from appdeck.platform.deploy.engine import DeployEngine
from appdeck.platform.deploy.preflight import PreflightService
from appdeck.platform.domains import DnsTxtResolver, DomainService
from appdeck.platform.env import EnvService
from appdeck.platform.health import HealthService
from appdeck.platform.logs import LogService
from appdeck.platform.oauth_clients import AppClientService
from appdeck.platform.pushes import CommitDeploys, PushPolicy
from appdeck.platform.repos.git import Git
from appdeck.platform.repos.hosted import HostedLimits, HostedRepos
from appdeck.platform.repos.hosting import HostedService
from appdeck.platform.repos.prune import kept_commits
from appdeck.platform.repos.service import RepoService
from appdeck.platform.repos.sources import RepoSources
from appdeck.platform.services import Platform, PlatformConfig
from appdeck.platform.sources import SourceRoots
from appdeck.platform.tables.databases import AppDatabases, open_databases
from appdeck.platform.tables.records_service import RecordService
from appdeck.platform.tables.schema_service import TableService
from appdeck.runtime.sandbox import Sandbox
from appdeck.storage import Storage, default_sqlite_url
from appdeck.storage.apps import AppStore
from appdeck.storage.ci import CIStore
from appdeck.storage.deployments import DeploymentStore
from appdeck.storage.domains import DomainStore
from appdeck.storage.identity import IdentityStore
from appdeck.storage.oauth import OAuthStore
from appdeck.storage.repos import RepoStore
from appdeck.storage.webhook_deliveries import WebhookDeliveries
from tests.platform.ci.shell_runner import ShellRunner
from tests.platform.deploy.fakes import FakeDriver, FakeRouter


async def no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


@dataclass
class OnFakes:
    platform: Platform
    runtime: FakeDriver
    router: FakeRouter
    admin: IdentityAdmin
    alice: Principal
    """Tenant admin of acme: owner of every app of acme."""
    bob: Principal
    """A plain user of acme: no role on any app until granted."""
    eve: Principal
    """Admin of another tenant."""
    source: Path
    databases: AppDatabases | None = None
    """The apps' databases (SQLite files): close them when done with tables."""


async def platform_on_fakes(
    storage: Storage,
    tmp_path: Path,
    *,
    sandbox: Sandbox | None = None,
    hosted: HostedLimits | None = None,
    driver: FakeDriver | None = None,
) -> OnFakes:
    """``sandbox``: git on local and hosted repositories runs in it; ``hosted``: each app's
    hosted repository is on (``platform.hosting``); ``driver``: the runtime driver (default:
    a :class:`FakeDriver`)."""
    roots = tmp_path / "src"
    source = roots / "shop"
    source.mkdir(parents=True)
    (source / "app.py").write_text("print('hi')\n")
    identities = IdentityStore(storage.engine)
    admin = IdentityAdmin(identities)
    principals = []
    for tenant, user, role in (
        ("acme", "alice", "admin"),
        ("acme", "bob", None),
        ("globex", "eve", "admin"),
    ):
        if await identities.get_tenant(tenant) is None:
            await admin.create_tenant(tenant)
        made = (
            await admin.create_user(tenant, user, None, role=role)
            if role
            else await admin.create_user(tenant, user, None)
        )
        principals.append(Principal(tenant, made.id, kind="oauth"))
    config = PlatformConfig(tmp_path / "data", None, [roots], 10, "127.0.0.1", 8088)
    feed = ChangeFeed()
    apps = AppService(
        AppStore(storage.engine),
        identities,
        feed,
        sources=SourceRoots([roots], data_dir=tmp_path / "data"),
        max_apps=10,
        url_of=config.url_of,
    )
    sealer = Sealer.from_settings(None, tmp_path)
    env = EnvService(apps, sealer, feed)
    runtime, router = driver or FakeDriver(), FakeRouter()
    store = DeploymentStore(storage.engine, transitions=states.check)
    made = HostedRepos(tmp_path / "hosted", sandbox, hosted) if hosted else None
    sources = RepoSources(  # built first, as Platform.build does: see there for the order
        RepoStore(storage.engine),
        git := Git(tmp_path / "repos", sandbox=sandbox),
        sealer,
        apps.sources,
        hosted=made,
        keep=functools.partial(kept_commits, store),
    )
    ci_store = CIStore(storage.engine)
    engine = DeployEngine(
        apps,
        env,
        store,
        runtime,
        router,
        feed,
        sealer,
        sources=apps.sources,
        instance_id="test",
        git=sources,
        gate=CIGate(ci_store),
        sleep=no_wait,
    )
    deployments = Deployments(apps, engine)
    commits = CommitDeploys(deployments, sources.is_newest)
    databases = await open_databases(default_sqlite_url(tmp_path), tmp_path / "data")
    _opened.append(databases)
    logs = LogService(apps, env, store, runtime, sealer)
    ci = CIService(
        apps,
        ci_store,
        sources,
        env,
        ShellRunner(),
        logs.masker,
        feed,
        deploy=commits.number,
        instance_id="test",
    )
    repos = RepoService(
        apps,
        sources,
        sealer,
        feed,
        on_commit=PushPolicy(ci, commits, sources),
        deliveries=WebhookDeliveries(storage.engine),
    )
    platform = Platform(
        feed=feed,
        apps=apps,
        env=env,
        deployments=deployments,
        preflight=PreflightService(apps, env, sandboxed=True, repository=sources.url),
        logs=logs,
        tables=TableService(apps, databases, feed),
        records=RecordService(apps, databases),
        deploys=engine,
        repos=repos,
        ci=ci,
        oauth_clients=AppClientService(apps, OAuthStore(storage.engine)),
        apis=ApiServices.build(
            storage.engine, apps, repos, feed, gate=KeyGate(), http=AppHttp("127.0.0.1", 9)
        ),
        domains=DomainService(  # custom domains (issue 21): nothing looked up here
            DomainStore(storage.engine),
            HostMap(),
            apps=apps.store,
            sealer=sealer,
            resolver=DnsTxtResolver("127.0.0.1:9"),
            urls=config.urls(),
        ),
        health=HealthService(apps, store, runtime, router.ingress.counters, feed),
        _driver=runtime,
        _router=router,  # type: ignore[arg-type]
        hosting=HostedService(apps, repos, git, made) if made is not None else None,
    )
    alice, bob, eve = principals
    return OnFakes(platform, runtime, router, admin, alice, bob, eve, source, databases)


_opened: list[AppDatabases] = []


async def close_app_databases() -> None:
    """Close the app databases :func:`platform_on_fakes` opened (their engines hold aiosqlite
    threads and connections): the autouse fixtures of tests/platform and tests/tools call it."""
    while _opened:
        await _opened.pop().close()


def shop_spec(source: Path) -> dict[str, object]:
    return {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "canary": {"percent": 10, "steps": [10, 100], "analysis_window_s": 0.1},
    }
