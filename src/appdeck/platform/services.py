"""The platform's services, built together (the composition root makes one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.env import EnvService
from appdeck.storage.apps import AppStore
from appdeck.storage.identity import IdentityStore


@dataclass(frozen=True, slots=True)
class PlatformConfig:
    data_dir: Path
    secret_key: str | None
    source_roots: list[Path]
    max_apps_per_tenant: int
    ingress_host: str
    ingress_port: int

    def url_of(self, app_name: str) -> str:
        return f"http://{app_name}.localhost:{self.ingress_port}/"


@dataclass(frozen=True, slots=True)
class Platform:
    feed: ChangeFeed
    apps: AppService
    env: EnvService
    config: PlatformConfig

    @classmethod
    def build(
        cls, engine: AsyncEngine, identities: IdentityStore, config: PlatformConfig
    ) -> Platform:
        feed = ChangeFeed()
        apps = AppService(
            AppStore(engine),
            identities,
            feed,
            source_roots=config.source_roots,
            max_apps=config.max_apps_per_tenant,
            url_of=config.url_of,
        )
        env = EnvService(apps, Sealer.from_settings(config.secret_key, config.data_dir), feed)
        return cls(feed=feed, apps=apps, env=env, config=config)
