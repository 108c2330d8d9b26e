"""A DeployEngine on the real database with the in-memory runtime driver and router
(tests/platform/deploy/fakes.py), watched by the watcher a test gives it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from appdeck.auth.admin import IdentityAdmin
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import states
from appdeck.platform.deploy.engine import DeployEngine
from appdeck.platform.deploy.watch import DeployWatcher
from appdeck.platform.env import EnvService
from appdeck.platform.services import PlatformConfig
from appdeck.platform.sources import SourceRoots
from appdeck.storage import Storage
from appdeck.storage.apps import AppRecord, AppStore
from appdeck.storage.deployments import DeploymentStore
from appdeck.storage.identity import IdentityStore
from tests.platform.deploy.fakes import FakeDriver, FakeRouter


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


@dataclass
class Rig:
    apps: AppService
    env: EnvService
    deploys: DeployEngine
    runtime: FakeDriver
    router: FakeRouter
    alice: Principal
    app_id: int

    async def deploy(self, strategy: str | None = None) -> str:
        app, record = await self.deploys.create(await self.app(), self.alice.user, strategy)
        return (await self.deploys.run(app, record)).state

    async def spec(self, **patch: object) -> None:
        await self.apps.set_spec(self.alice, self.app_id, dict(patch))

    async def app(self) -> AppRecord:
        """The app as the façade hands it to the engine, after its one role check."""
        return (await self.apps.load(self.alice, self.app_id, "deploy.write")).app


async def watched_rig(
    storage: Storage, tmp_path: Path, watcher: DeployWatcher, runtime: FakeDriver | None = None
) -> Rig:
    """acme's app ``shop`` (two instances, a canary in steps 10, 50, 100), not deployed yet."""
    source = tmp_path / "src"
    source.mkdir()
    identities = IdentityStore(storage.engine)
    admin = IdentityAdmin(identities)
    await admin.create_tenant("acme")
    user = await admin.create_user("acme", "alice", None, role="admin")
    alice = Principal("acme", user.id, kind="oauth")
    config = PlatformConfig(tmp_path, None, [tmp_path], 10, "127.0.0.1", 8088)
    feed = ChangeFeed()
    apps = AppService(
        AppStore(storage.engine),
        identities,
        feed,
        sources=SourceRoots([source], data_dir=tmp_path / "data"),
        max_apps=10,
        url_of=config.url_of,
    )
    sealer = Sealer.from_settings(None, tmp_path)
    env = EnvService(apps, sealer, feed)
    runtime = runtime or FakeDriver()
    router = FakeRouter()
    deploys = DeployEngine(
        apps,
        env,
        DeploymentStore(storage.engine, transitions=states.check),
        runtime,
        router,
        feed,
        sealer,
        sources=apps.sources,
        instance_id="test",
        sleep=_no_wait,
        watcher=watcher,
    )
    spec = {
        "source_path": str(source),
        "run_command": "python app.py",
        "instances": 2,
        "canary": {"percent": 10, "steps": [10, 50, 100], "analysis_window_s": 0.1},
    }
    app = await apps.register(alice, "shop", spec)
    return Rig(apps, env, deploys, runtime, router, alice, app.app.id)
