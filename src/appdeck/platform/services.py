"""The platform's services, built together (the composition root makes one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.platform import hostnames
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy.engine import DeployService, Operations
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.platform.deploy.local import LocalRuntime
from appdeck.platform.env import EnvService
from appdeck.platform.logs import LogService
from appdeck.platform.routing import AppRoutes
from appdeck.platform.runtime.driver import RuntimeDriver
from appdeck.platform.sources import SourceRoots
from appdeck.storage.apps import AppRecord, AppStore
from appdeck.storage.deployments import DeploymentStore
from appdeck.storage.identity import IdentityStore


@dataclass(frozen=True, slots=True)
class PlatformConfig:
    data_dir: Path
    secret_key: str | None
    source_roots: list[Path]
    """As configured (``{tenant}`` unexpanded, empty for the default): see ``SourceRoots``."""
    max_apps_per_tenant: int
    ingress_host: str
    ingress_port: int

    def url_of(self, app_name: str, tenant: str) -> str:
        """Where the app is served (the hostname rule is :mod:`appdeck.platform.hostnames`)."""
        return hostnames.url(app_name, tenant, self.ingress_port)


@dataclass(frozen=True, slots=True)
class Platform:
    feed: ChangeFeed
    apps: AppService
    env: EnvService
    deploys: DeployService
    ops: Operations
    driver: RuntimeDriver
    router: IngressRouter
    config: PlatformConfig
    logs: LogService

    @classmethod
    def build(
        cls,
        engine: AsyncEngine,
        identities: IdentityStore,
        config: PlatformConfig,
        *,
        driver: RuntimeDriver,
        router: IngressRouter,
        instance_id: str,
    ) -> Platform:
        feed = ChangeFeed()
        sources = SourceRoots(config.source_roots, data_dir=config.data_dir)
        apps = AppService(
            AppStore(engine),
            identities,
            feed,
            sources=sources,
            max_apps=config.max_apps_per_tenant,
            url_of=config.url_of,
        )
        sealer = Sealer.from_settings(config.secret_key, config.data_dir)
        env = EnvService(apps, sealer, feed)
        deployments = DeploymentStore(engine)
        deploys = DeployService(
            apps,
            env,
            deployments,
            LocalRuntime(driver, sandboxed=driver.sandboxed),
            router,
            feed,
            sealer,
            sources=sources,
            instance_id=instance_id,
        )
        logs = LogService(apps, env, deployments, driver, sealer)
        ops = Operations(deploys)
        platform = cls(feed, apps, env, deploys, ops, driver, router, config, logs)
        apps.on_delete(platform._remove_app)
        AppRoutes(apps, router).attach(feed)  # after: the processes stop, then the route goes
        return platform

    async def start(self) -> tuple[int, int]:
        """After a restart: route every app (503 until it has a live release), then end
        interrupted deployments and bring live releases back."""
        await AppRoutes(self.apps, self.router).restore()
        return await self.ops.reconcile()

    async def _remove_app(self, app: AppRecord) -> None:
        prefix = f"{app.id}-"
        for release_id in await self.driver.releases():
            if release_id.startswith(prefix):
                await self.driver.remove(release_id)
