"""The deploy engine's decisions: strategies, failures, automatic rollback, rollback, restart,
reconciliation. Real database; in-memory runtime and router (see fakes.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from appdeck.auth.admin import IdentityAdmin
from appdeck.common.errors import Conflict, FailedPrecondition, InvalidArgument, QuotaExceeded
from appdeck.common.identity import Principal
from appdeck.events.signals import LocalBroadcast
from appdeck.ingress import Counters, RouteTable
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import states
from appdeck.platform.deploy.engine import DeployEngine
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.platform.deploy.locks import AppLocks
from appdeck.platform.deploy.ports import Backend, Instance, Readiness, Release
from appdeck.platform.env import EnvService
from appdeck.platform.routing import AppRoutes
from appdeck.platform.services import PlatformConfig
from appdeck.platform.sources import SourceRoots
from appdeck.storage import Storage
from appdeck.storage.app_locks import AppLockStore
from appdeck.storage.apps import AppRecord, AppStore
from appdeck.storage.deployments import DeploymentRecord, DeploymentStore
from appdeck.storage.identity import IdentityStore
from appdeck.storage.schema import app_locks

from . import fakes
from .fakes import FakeDriver, FakeRouter

SHOP = "shop--acme"
"""The route key of acme's app ``shop`` (its hostname is ``shop--acme.localhost``)."""
SHOP_HOST = f"{SHOP}.localhost"
GLOBEX_HOST = "shop--globex.localhost"


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
    feed: ChangeFeed
    sealer: Sealer

    async def deploy(self, strategy: str | None = None) -> str:
        app, record = await self.deploys.create(await self.app(), self.alice.user, strategy)
        return (await self.deploys.run(app, record)).state

    async def spec(self, **patch: object) -> None:
        await self.apps.set_spec(self.alice, self.app_id, dict(patch))

    async def app(self) -> AppRecord:
        """The app as the façade hands it to the engine, after its one role check."""
        return (await self.apps.load(self.alice, self.app_id, "deploy.write")).app

    async def states(self) -> dict[int, str]:
        return {d.number: d.state for d in await self.deploys.store.for_app(self.app_id)}


@pytest.fixture
async def rig(storage: Storage, tmp_path: Path) -> Rig:
    return await make_rig(storage, tmp_path)


async def make_rig(
    storage: Storage,
    tmp_path: Path,
    runtime: FakeDriver | None = None,
    router: FakeRouter | None = None,
) -> Rig:
    """acme's admin alice and her app ``shop`` (two instances, a canary in steps 10, 50,
    100), not deployed yet, on the fakes (``runtime`` and ``router``: fakes set otherwise)."""
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
        sources=SourceRoots([tmp_path / "src"], data_dir=tmp_path / "data"),
        max_apps=10,
        url_of=config.url_of,
    )
    sealer = Sealer.from_settings(None, tmp_path)
    env = EnvService(apps, sealer, feed)
    runtime = runtime if runtime is not None else FakeDriver()
    router = router if router is not None else FakeRouter()
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
    )
    spec = {
        "source_path": str(source),
        "run_command": "python app.py",
        "instances": 2,
        "canary": {"percent": 10, "steps": [10, 50, 100], "analysis_window_s": 0.1},
    }
    app = await apps.register(alice, "shop", spec)
    return Rig(apps, env, deploys, runtime, router, alice, app.app.id, feed, sealer)


async def test_a_first_deploy_goes_live_with_all_traffic(rig: Rig) -> None:
    assert await rig.deploy() == "live"
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}
    assert len(await rig.runtime.running(f"{rig.app_id}-1")) == 2


async def test_a_rolling_deploy_replaces_the_old_release_without_a_gap(rig: Rig) -> None:
    await rig.deploy()
    assert await rig.deploy("rolling") == "live"
    assert await rig.states() == {1: "superseded", 2: "live"}
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-2": 100}
    assert await rig.runtime.running(f"{rig.app_id}-1") == []
    assert all(h for h in rig.router.history)  # the route was never empty


async def test_recreate_stops_the_old_release_first(rig: Rig) -> None:
    await rig.deploy()
    assert await rig.deploy("recreate") == "live"
    assert {} in rig.router.history  # the gap recreate accepts


async def test_blue_green_switches_at_once_and_keeps_the_old_set_warm(rig: Rig) -> None:
    await rig.deploy()
    assert await rig.deploy("blue_green") == "live"
    assert len(await rig.runtime.running(f"{rig.app_id}-1")) == 2  # warm
    prepared = len(rig.runtime.prepared)
    restored = await rig.deploys.rollback(await rig.app())
    assert restored.number == 1
    assert len(rig.runtime.prepared) == prepared  # instant: nothing rebuilt
    assert await rig.states() == {1: "live", 2: "rolled_back"}
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}


async def test_a_bad_canary_is_rolled_back_automatically(rig: Rig) -> None:
    await rig.deploy()
    rig.router.error_rates[f"{rig.app_id}-2"] = 0.5
    assert await rig.deploy("canary") == "rolled_back"
    assert await rig.states() == {1: "live", 2: "rolled_back"}
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}
    assert await rig.runtime.running(f"{rig.app_id}-2") == []
    assert {f"{rig.app_id}-2": 10, f"{rig.app_id}-1": 90} in rig.router.history
    record = await rig.deploys.store.get(rig.app_id, 2)
    assert record is not None
    assert "5xx" in (record.status_message or "")


async def test_a_good_canary_is_promoted_in_steps(rig: Rig) -> None:
    await rig.deploy()
    assert await rig.deploy("canary") == "live"
    shares = [h.get(f"{rig.app_id}-2") for h in rig.router.history if f"{rig.app_id}-2" in h]
    assert shares == [10, 50, 100]
    record = await rig.deploys.store.get(rig.app_id, 2)
    assert record is not None
    assert "canary" in [s["state"] for s in record.steps]
    passed = [s["message"] for s in record.steps if " passed: " in s["message"]]
    assert [m.split(" passed")[0] for m in passed] == ["Canary at 10%", "Canary at 50%"]
    assert all("requests answered 5xx" in m and "limit" in m for m in passed)  # the rate shown


async def test_a_failed_build_leaves_the_live_release_serving(rig: Rig) -> None:
    await rig.deploy()
    await rig.spec(build_command="false")
    assert await rig.deploy() == "failed"
    assert await rig.states() == {1: "live", 2: "failed"}
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}


async def test_an_unhealthy_release_fails_and_traffic_stays_on_the_old_one(rig: Rig) -> None:
    await rig.deploy()
    await rig.env.set_vars(rig.alice, rig.app_id, {"UNHEALTHY": "1"}, secret=False)
    assert await rig.deploy("blue_green") == "failed"
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}
    assert await rig.runtime.running(f"{rig.app_id}-2") == []


async def test_one_deployment_at_a_time_per_app(rig: Rig) -> None:
    await rig.deploys.create(await rig.app(), rig.alice.user, None)
    with pytest.raises(Conflict):
        await rig.deploys.create(await rig.app(), rig.alice.user, None)


async def test_bad_requests_change_nothing(rig: Rig) -> None:
    with pytest.raises(InvalidArgument):
        await rig.deploys.create(await rig.app(), rig.alice.user, "yolo")
    await rig.spec(source_path=None)
    with pytest.raises(FailedPrecondition):
        await rig.deploys.create(await rig.app(), rig.alice.user, None)
    assert await rig.states() == {}


async def test_a_restart_keeps_traffic_flowing(rig: Rig) -> None:
    await rig.deploy()
    rig.router.history.clear()
    await rig.deploys.restart(await rig.app())
    assert all(h == {f"{rig.app_id}-1": 100} for h in rig.router.history)
    assert len(await rig.runtime.running(f"{rig.app_id}-1")) == 2


async def test_reconcile_fails_interrupted_deploys_and_restores_live_routes(
    rig: Rig, storage: Storage
) -> None:
    await rig.deploy()
    await rig.deploys.create(
        await rig.app(), rig.alice.user, None
    )  # never run: as if the server died
    await _expire_locks(storage)  # ... and its lease ran out
    survivors = dict(rig.runtime.running_[f"{rig.app_id}-1"])
    rig.runtime.running_.clear()
    rig.router.table.clear()
    rig.runtime.adoptable[f"{rig.app_id}-1"] = {0: survivors[0]}  # one instance survived
    interrupted, restored = await rig.deploys.reconcile()
    assert (interrupted, restored) == (1, 1)
    assert await rig.states() == {1: "live", 2: "failed"}
    assert len(rig.router.table[SHOP][0].upstreams) == 2  # adopted one, restarted one


async def test_an_orphan_whose_release_stops_slower_than_the_lease_is_still_ended_by_its_reclaimer(
    rig: Rig, storage: Storage
) -> None:
    """The reclaimer renews the app's lease while it works: a stop that waits longer than
    the lease (a route broadcast the paused replica's HAProxy never runs) must not let
    another replica take the app meanwhile, or every sweep ends Fenced and starts over."""
    await rig.deploy()
    await rig.deploys.create(await rig.app(), rig.alice.user, None)  # its driver "died"
    await _expire_locks(storage)
    # a lease long enough that a renewal every ttl/3 is not missed on a loaded machine
    rig.deploys.locks = AppLocks(AppLockStore(storage.engine), "test", ttl=3.0)
    other = AppLocks(AppLockStore(storage.engine), "other", ttl=3.0)
    stop = rig.runtime.stop
    taken: list[object] = []

    async def slow_stop(release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        await asyncio.sleep(7.0)  # past the lease, twice over
        taken.append(await other.try_take(rig.app_id))
        await stop(release_id, index, grace_s)

    rig.runtime.stop = slow_stop  # type: ignore[method-assign]
    record = await rig.deploys.store.get(rig.app_id, 2)
    assert record is not None
    async with asyncio.timeout(30):
        assert await rig.deploys.reclaim_orphan(await rig.app(), record) is True
    assert taken == [None]  # the reclaimer still held the app
    assert await rig.states() == {1: "live", 2: "failed"}


async def _expire_locks(storage: Storage) -> None:
    """Every app lease runs out, as when the replica holding it is dead or paused."""
    async with storage.engine.begin() as conn:
        await conn.execute(sa.update(app_locks).values(expires_at=1.0))


# -- one hostname per app: another tenant's app of the same name never moves this one's route --


@dataclass
class Neighbour:
    """Tenant globex's admin, with an app named like acme's (``shop``)."""

    principal: Principal
    app_id: int


async def _neighbour(rig: Rig, storage: Storage) -> Neighbour:
    admin = IdentityAdmin(IdentityStore(storage.engine))
    await admin.create_tenant("globex")
    user = await admin.create_user("globex", "bob", None, role="admin")
    bob = Principal("globex", user.id, kind="oauth")
    acme_shop = await rig.apps.get(rig.alice, rig.app_id)
    made = await rig.apps.register(bob, "shop", dict(acme_shop.app.spec))
    return Neighbour(bob, made.app.id)


async def _deploy_as(rig: Rig, who: Neighbour, strategy: str | None = None) -> str:
    app = (await rig.apps.load(who.principal, who.app_id, "deploy.write")).app
    app, record = await rig.deploys.create(app, who.principal.user, strategy)
    return (await rig.deploys.run(app, record)).state


def _attach_routes(rig: Rig, router: FakeRouter) -> AppRoutes:
    routes = AppRoutes(rig.apps, router.ingress)
    routes.attach(rig.feed)
    return routes


async def test_another_tenants_app_of_the_same_name_never_changes_what_a_hostname_serves(
    rig: Rig, storage: Storage
) -> None:
    _attach_routes(rig, rig.router)
    assert await rig.deploy() == "live"
    acme = f"{rig.app_id}-1"
    assert rig.router.serves(SHOP_HOST) == acme

    bob = await _neighbour(rig, storage)  # registering: acme's host still serves acme
    assert rig.router.serves(SHOP_HOST) == acme
    assert rig.router.serves(GLOBEX_HOST) is None  # known to the table, nothing live yet
    assert "shop--globex" in rig.router.ingress.table

    for strategy in ("rolling", "canary", "blue_green", "recreate"):  # deploying
        assert await _deploy_as(rig, bob, strategy) == "live", strategy
        assert rig.router.serves(SHOP_HOST) == acme, strategy
    live = await rig.deploys.live(bob.app_id)
    assert live is not None
    assert rig.router.serves(GLOBEX_HOST) == f"{bob.app_id}-{live.number}"

    bobs = (await rig.apps.load(bob.principal, bob.app_id, "deploy.write")).app
    await rig.deploys.restart(bobs)  # restarting and rolling back
    bobs = (await rig.apps.load(bob.principal, bob.app_id, "deploy.write")).app
    await rig.deploys.rollback(bobs)
    assert rig.router.serves(SHOP_HOST) == acme

    renamed = await rig.apps.update(bob.principal, bob.app_id, name="shop2")  # renaming
    assert renamed.url == "http://shop2--globex.localhost:8088/"
    assert rig.router.serves(SHOP_HOST) == acme
    assert rig.router.serves("shop2--globex.localhost") is not None
    assert "shop--globex" not in rig.router.ingress.table

    await rig.apps.update(bob.principal, bob.app_id, name="shop")  # and back
    await rig.apps.delete(bob.principal, bob.app_id, confirmed=True)  # deleting
    assert rig.router.serves(SHOP_HOST) == acme
    assert "shop--globex" not in rig.router.ingress.table
    assert rig.router.ingress.table.keys() == ["shop--acme"]


async def test_renaming_or_deleting_acmes_app_leaves_globexs_app_of_that_name_alone(
    rig: Rig, storage: Storage
) -> None:
    _attach_routes(rig, rig.router)
    bob = await _neighbour(rig, storage)
    assert await _deploy_as(rig, bob) == "live"
    globex = f"{bob.app_id}-1"
    assert await rig.deploy() == "live"
    await rig.apps.update(rig.alice, rig.app_id, name="store")
    assert rig.router.serves(GLOBEX_HOST) == globex
    assert rig.router.serves("store--acme.localhost") == f"{rig.app_id}-1"
    assert rig.router.serves(SHOP_HOST) is None
    await rig.apps.delete(rig.alice, rig.app_id, confirmed=True)
    assert rig.router.serves(GLOBEX_HOST) == globex
    assert rig.router.ingress.table.keys() == ["shop--globex"]


async def test_after_a_restart_each_tenants_app_gets_its_own_hostname_back(
    rig: Rig, storage: Storage
) -> None:
    bob = await _neighbour(rig, storage)
    assert await rig.deploy() == "live"
    assert await _deploy_as(rig, bob) == "live"
    acme, globex = f"{rig.app_id}-1", f"{bob.app_id}-1"

    # the server restarts: empty route table, the instances survive and are adopted
    restarted = FakeRouter()
    rig.deploys.router = restarted
    for release_id in (acme, globex):
        rig.runtime.adoptable[release_id] = rig.runtime.running_.pop(release_id)
    routes = _attach_routes(rig, restarted)
    assert await routes.restore() == 2
    assert await rig.deploys.reconcile() == (0, 2)
    assert restarted.serves(SHOP_HOST) == acme
    assert restarted.serves(GLOBEX_HOST) == globex

    await rig.apps.update(bob.principal, bob.app_id, name="renamed")
    await rig.apps.delete(bob.principal, bob.app_id, confirmed=True)
    assert restarted.serves(SHOP_HOST) == acme
    assert restarted.ingress.table.keys() == ["shop--acme"]


async def test_an_app_name_too_long_for_its_tenants_hostnames_is_refused(
    rig: Rig, storage: Storage
) -> None:
    admin = IdentityAdmin(IdentityStore(storage.engine))
    tenant = "t" * 40
    await admin.create_tenant(tenant)
    user = await admin.create_user(tenant, "tess", None, role="admin")
    tess = Principal(tenant, user.id, kind="oauth")
    with pytest.raises(InvalidArgument, match="at most 21"):
        await rig.apps.register(tess, "a" * 22)
    made = await rig.apps.register(tess, "a" * 21)
    with pytest.raises(InvalidArgument, match="at most 21"):
        await rig.apps.update(tess, made.app.id, name="b" * 22)
    with pytest.raises(InvalidArgument, match="--"):
        await admin.create_tenant("two--parts")


# -- replicas: one deploy, rollback or restart of an app at a time, cluster-wide --------------


@dataclass
class GatedRuntime(FakeDriver):
    """Builds of the releases in ``gated`` wait for ``gate`` (a replica busy, or paused)."""

    gated: set[str] = field(default_factory=set)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)

    async def prepare(self, release: Release, *, rebuild: bool = False) -> None:
        if release.release_id in self.gated:
            self.entered.set()
            await self.gate.wait()
        await super().prepare(release, rebuild=rebuild)


@dataclass
class Replica:
    deploys: DeployEngine


def _replica(rig: Rig, name: str, runtime: FakeDriver | None = None) -> Replica:
    """Another replica on the same database, host and ingress (the rig's is ``test``)."""
    deploys = DeployEngine(
        rig.apps,
        rig.env,
        DeploymentStore(rig.deploys.store.engine, transitions=states.check),
        runtime or rig.runtime,
        rig.router,
        rig.feed,
        rig.sealer,
        sources=rig.apps.sources,
        instance_id=name,
        sleep=_no_wait,
    )
    return Replica(deploys)


async def test_fifty_concurrent_deploys_over_three_replicas_make_exactly_one(rig: Rig) -> None:
    replicas = [_replica(rig, name) for name in ("a", "b", "c")]
    app = await rig.app()
    async with asyncio.timeout(120):
        outcomes = await asyncio.gather(
            *(replicas[i % 3].deploys.create(app, rig.alice.user, None) for i in range(50)),
            return_exceptions=True,
        )
    made = [o for o in outcomes if isinstance(o, tuple)]
    assert len(made) == 1
    assert all(isinstance(o, Conflict) for o in outcomes if not isinstance(o, tuple))
    assert await rig.states() == {1: "queued"}
    owner = next(r for r in replicas if r.deploys.locks.instance_id == made[0][1].instance_id)
    assert (await owner.deploys.run(*made[0])).state == "live"


async def test_a_deploy_a_live_replica_drives_is_left_alone_by_another_replicas_reconcile(
    rig: Rig,
) -> None:
    await rig.deploy()
    gated = GatedRuntime(running_=rig.runtime.running_, gated={f"{rig.app_id}-2"})
    a, b = _replica(rig, "a", gated), _replica(rig, "b")
    app, record = await a.deploys.create(await rig.app(), rig.alice.user, None)
    run = asyncio.ensure_future(a.deploys.run(app, record))
    async with asyncio.timeout(10):
        await gated.entered.wait()
    assert await b.deploys.reconcile() == (0, 1)  # b starts up: a's deploy is alive, not touched
    with pytest.raises(Conflict, match="deployment 2 of this app is still building"):
        await b.deploys.create(await rig.app(), rig.alice.user, None)
    gated.gate.set()
    async with asyncio.timeout(10):
        assert (await run).state == "live"
    assert await rig.states() == {1: "superseded", 2: "live"}


@dataclass
class Takeover:
    """Replica a's deploy (#2) paused in its build past its lease; b took the app over (its
    reclaim failed #2) and created #3."""

    gated: GatedRuntime
    b: Replica
    app: AppRecord
    run: asyncio.Future[DeploymentRecord]
    third: DeploymentRecord


async def _paused_past_its_lease(rig: Rig, storage: Storage) -> Takeover:
    await rig.deploy()
    gated = GatedRuntime(running_=rig.runtime.running_, gated={f"{rig.app_id}-2"})
    a, b = _replica(rig, "a", gated), _replica(rig, "b")
    app, record = await a.deploys.create(await rig.app(), rig.alice.user, None)
    run = asyncio.ensure_future(a.deploys.run(app, record))
    async with asyncio.timeout(10):
        await gated.entered.wait()  # a is "paused" in its build ...
    await _expire_locks(storage)  # ... past its lease
    _, third = await b.deploys.create(await rig.app(), rig.alice.user, None)  # b takes the app over
    return Takeover(gated, b, app, run, third)


async def test_a_replica_paused_past_its_lease_finds_its_writes_refused_and_stops_quietly(
    rig: Rig, storage: Storage
) -> None:
    t = await _paused_past_its_lease(rig, storage)
    failed = await rig.deploys.store.get(rig.app_id, 2)
    assert failed is not None
    assert failed.state == "failed"
    assert "lost its lock" in (failed.status_message or "")
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}  # the live release serves
    t.gated.gate.set()  # a wakes up: its next write is refused, and it stops
    async with asyncio.timeout(10):
        after = await t.run
    assert after.state == "failed"
    assert await rig.runtime.running(f"{rig.app_id}-2") == []
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}
    assert (await t.b.deploys.run(t.app, t.third)).state == "live"
    assert await rig.states() == {1: "superseded", 2: "failed", 3: "live"}


async def test_a_paused_replicas_deploy_cancelled_after_the_takeover_says_it_was_fenced(
    rig: Rig, storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    """A wakes to a cancel (its task, failed meanwhile, is stopped by its own re-read), not
    to its build: the unwind's "cancelled" is refused for the lost lease, said in the log,
    and the takeover's "failed" stands (seen in a CI run as an IllegalTransition traceback,
    failed -> cancelled, which hid the fence)."""
    t = await _paused_past_its_lease(rig, storage)
    t.run.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await t.run
    failed = await rig.deploys.store.get(rig.app_id, 2)
    assert failed is not None
    assert (failed.state, "lost its lock" in (failed.status_message or "")) == ("failed", True)
    said = [
        r.getMessage() for r in caplog.records if "its cancel was not written" in r.getMessage()
    ]
    assert len(said) == 1
    assert f"app {rig.app_id}: the lease fenced" in said[0]
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}
    assert (await t.b.deploys.run(t.app, t.third)).state == "live"


async def test_a_rollback_waits_for_the_deploy_under_way_on_another_replica(rig: Rig) -> None:
    await rig.deploy()
    await rig.deploy()
    gated = GatedRuntime(running_=rig.runtime.running_, gated={f"{rig.app_id}-3"})
    a, b = _replica(rig, "a", gated), _replica(rig, "b")
    app, record = await a.deploys.create(await rig.app(), rig.alice.user, None)
    run = asyncio.ensure_future(a.deploys.run(app, record))
    async with asyncio.timeout(10):
        await gated.entered.wait()
    rollback = asyncio.ensure_future(b.deploys.rollback(await rig.app()))
    await asyncio.sleep(0.5)
    assert not rollback.done()  # the app is a's until its deploy ends
    gated.gate.set()
    async with asyncio.timeout(20):
        assert (await run).state == "live"
        assert (await rollback).number == 2
    assert await rig.states() == {1: "superseded", 2: "live", 3: "rolled_back"}


# -- the routes' backstop: a replica that missed route messages catches up from the database --


def _weights(router: IngressRouter, route: str) -> dict[str, int] | None:
    found = router.table.get(route)
    return None if found is None else {b.release_id: b.weight for b in found}


async def test_a_replica_that_missed_the_messages_catches_up_from_the_database(rig: Rig) -> None:
    await rig.deploy()
    await rig.deploy("rolling")
    behind = IngressRouter(RouteTable(), Counters())  # a replica whose broadcast was down all along
    behind.route(
        "gone--acme", [Backend("9-1", 100, ("127.0.0.1:20001",))]
    )  # an app deleted meanwhile
    assert await rig.deploys.resync_routes(behind) == 2
    assert _weights(behind, SHOP) == {f"{rig.app_id}-2": 100}
    assert "gone--acme" not in behind.table
    assert await rig.deploys.resync_routes(behind) == 0  # nothing left to repair
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-2": 100}  # its own table only


async def test_the_backstop_leaves_an_app_with_a_deploy_under_way_to_its_messages(
    rig: Rig,
) -> None:
    await rig.deploy()
    await rig.deploys.create(await rig.app(), rig.alice.user, None)
    behind = IngressRouter(RouteTable(), Counters())
    canary = [
        Backend(f"{rig.app_id}-2", 10, ("127.0.0.1:20003",)),
        Backend(f"{rig.app_id}-1", 90, ("127.0.0.1:20001",)),
    ]
    behind.route(SHOP, canary)  # as the deploy's last message said
    assert await rig.deploys.resync_routes(behind) == 0
    assert _weights(behind, SHOP) == {f"{rig.app_id}-2": 10, f"{rig.app_id}-1": 90}


@dataclass
class WatchedRuntime(FakeDriver):
    """Records every instance stopped while another replica's ingress still routed to it."""

    elsewhere: IngressRouter | None = None
    stale: list[str] = field(default_factory=list)

    async def stop(self, release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        running = self.running_.get(release_id, {})
        stopping = list(running.values()) if index is None else [running[index]]
        for backend in (self.elsewhere.table.get(SHOP) or []) if self.elsewhere else []:
            for instance in stopping:
                if backend.weight and instance.upstream in backend.upstreams:
                    self.stale.append(f"{instance.release_id}#{instance.index}")
        await super().stop(release_id, index, grace_s)


async def test_another_replicas_ingress_follows_every_step_and_never_routes_to_a_stopped_instance(
    rig: Rig,
) -> None:
    broadcast = LocalBroadcast()  # delivery order as Redis keeps it; no network in between
    here, there = IngressRouter(RouteTable(), Counters()), IngressRouter(RouteTable(), Counters())
    await here.share(broadcast, "a")
    await there.share(broadcast, "b")
    runtime = WatchedRuntime(elsewhere=there)
    deploys = DeployEngine(
        rig.apps,
        rig.env,
        rig.deploys.store,
        runtime,
        here,
        rig.feed,
        rig.sealer,
        sources=rig.apps.sources,
        instance_id="a",
        sleep=_no_wait,
    )
    try:
        for strategy in ("rolling", "rolling", "blue_green", "canary", "recreate", "rolling"):
            app, record = await deploys.create(await rig.app(), rig.alice.user, strategy)
            assert (await deploys.run(app, record)).state == "live", strategy
            assert there.table.get(SHOP) == here.table.get(SHOP), strategy
        await deploys.restart(await rig.app())
        await deploys.rollback(await rig.app())
        await deploys.settle()
        assert there.table.get(SHOP) == here.table.get(SHOP)
        assert there.serving(SHOP) == {f"{rig.app_id}-5"}
        assert runtime.stale == []
    finally:
        await here.close()
        await there.close()


async def test_a_sole_server_restarted_at_once_fails_what_its_previous_run_left_in_progress(
    rig: Rig,
) -> None:
    await rig.deploy()
    await rig.deploys.create(await rig.app(), rig.alice.user, None)  # the previous run died here
    restarted = _replica(rig, "restarted")  # lease still unexpired: a replica would wait
    assert await restarted.deploys.reconcile() == (0, 1)
    assert (await rig.states())[2] == "queued"
    assert await restarted.deploys.reconcile(sole=True) == (1, 1)  # no replicas: void at once
    assert await rig.states() == {1: "live", 2: "failed"}


async def test_a_replica_deploys_over_a_live_release_another_replica_started(rig: Rig) -> None:
    await rig.deploy()  # replica "test" started release 1
    live = f"{rig.app_id}-1"
    b_runtime = FakeDriver(adoptable={live: dict(rig.runtime.running_[live])})
    b = _replica(rig, "b", b_runtime)
    rig.router.history.clear()
    app, record = await b.deploys.create(await rig.app(), rig.alice.user, "rolling")
    assert (await b.deploys.run(app, record)).state == "live"
    assert {f"{rig.app_id}-2": 50, live: 50} in rig.router.history  # old kept serving meanwhile
    assert all(rig.router.history)
    assert await b_runtime.running(live) == []  # adopted, then retired
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-2": 100}


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (InvalidArgument("source path '.appdeck/x' is not absolute"), "is not absolute"),
        (RuntimeError("boom in /srv/appdeck/data"), "internal error"),
    ],
    ids=["refused", "bug"],
)
async def test_a_deploy_that_raises_says_why_in_words_never_an_exception_class(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, raised: Exception, said: str
) -> None:
    """Issue 20 item 5: the agent saw ``Failed: internal error (InvalidArgument)``."""

    async def prepare(release: Release, *, rebuild: bool = False) -> None:
        raise raised

    monkeypatch.setattr(rig.runtime, "prepare", prepare)
    assert await rig.deploy() == "failed"
    record = (await rig.deploys.store.for_app(rig.app_id))[0]
    message = record.status_message or ""
    assert said in message
    assert type(raised).__name__ not in message
    assert "/srv/appdeck" not in message


async def test_a_rollback_to_a_release_beyond_the_tenant_quota_is_refused(rig: Rig) -> None:
    await rig.spec(instances=4, resources={"memory_mb": 2048})  # 8 GiB: the whole quota
    assert await rig.deploy() == "live"
    await rig.spec(instances=1)
    assert await rig.deploy() == "live"  # #1 superseded: no longer counted
    big = {"instances": 4, "resources": {"memory_mb": 1024}}
    other = await rig.apps.register(rig.alice, "other", big)
    with pytest.raises(QuotaExceeded, match="APPDECK_TENANT_MEMORY_MB"):
        await rig.deploys.rollback(await rig.app())  # #1 would hold 8 GiB again
    assert await rig.states() == {1: "superseded", 2: "live"}
    await rig.apps.delete(rig.alice, other.app.id, confirmed=True)
    assert (await rig.deploys.rollback(await rig.app())).number == 1


async def test_a_rollback_to_a_release_no_bigger_than_the_live_one_passes_over_a_lowered_quota(
    rig: Rig,
) -> None:
    await rig.spec(instances=2, resources={"memory_mb": 1024})
    assert await rig.deploy() == "live"
    await rig.spec(instances=2, resources={"memory_mb": 2048})
    assert await rig.deploy() == "live"  # #2 holds 4 GiB, #1 (superseded) asked for 2
    await rig.apps.register(rig.alice, "other", {"instances": 4, "resources": {"memory_mb": 1024}})
    rig.apps.limits = dataclasses.replace(rig.apps.limits, tenant_memory_mb=4096)  # 8 GiB held
    assert (await rig.deploys.rollback(await rig.app())).number == 1  # grows nothing: passes
    assert await rig.states() == {1: "live", 2: "rolled_back"}


# -- a restart that fails (issue 20, item 7) ------------------------------------------------


async def _indices(r: Rig, release: str) -> list[int]:
    return [i.index for i in await r.runtime.running(release)]


async def test_a_restart_whose_spare_fails_leaves_no_spare_and_the_next_restart_works(
    rig: Rig,
) -> None:
    assert await rig.deploy() == "live"
    release = f"{rig.app_id}-1"
    rig.runtime.health_plan = [False]  # the spare instance never gets healthy
    with pytest.raises(FailedPrecondition) as failed:
        await rig.deploys.restart(await rig.app())
    assert "restart" in failed.value.message
    assert failed.value.hint
    assert await _indices(rig, release) == [0, 1]  # no spare left behind
    assert len(rig.router.table[SHOP][0].upstreams) == 2  # both still serve
    await rig.deploys.restart(await rig.app())  # and the next restart works
    assert await _indices(rig, release) == [0, 1]
    assert len(rig.router.table[SHOP][0].upstreams) == 2


async def test_a_restart_failing_midway_stops_the_failed_instance_and_the_spare(
    rig: Rig,
) -> None:
    assert await rig.deploy() == "live"
    release = f"{rig.app_id}-1"
    rig.runtime.health_plan = [True, False]  # the spare comes up, instance 0 does not
    with pytest.raises(FailedPrecondition):
        await rig.deploys.restart(await rig.app())
    running = await rig.runtime.running(release)
    assert [i.index for i in running] == [1]  # the failed one and the spare are gone
    assert rig.router.table[SHOP][0].upstreams == (running[0].upstream,)
    await rig.deploys.restart(await rig.app())
    assert await _indices(rig, release) == [0, 1]
    assert len(rig.router.table[SHOP][0].upstreams) == 2


async def test_a_restart_of_a_one_instance_app_failing_keeps_it_answering(rig: Rig) -> None:
    await rig.spec(instances=1)
    assert await rig.deploy() == "live"
    release = f"{rig.app_id}-1"
    rig.runtime.health_plan = [True, False]  # the spare comes up, the restarted one does not
    with pytest.raises(FailedPrecondition) as failed:
        await rig.deploys.restart(await rig.app())
    assert "spare" in failed.value.message
    running = await rig.runtime.running(release)
    assert rig.router.table[SHOP][0].upstreams == tuple(i.upstream for i in running)
    assert len(running) == 1  # the spare alone serves: no downtime
    await rig.deploys.restart(await rig.app())  # the next restart puts instance 0 back
    assert await _indices(rig, release) == [0]


# -- a stopped app (issue 20, item 10) ---------------------------------------------------------


async def test_a_stopped_app_stays_stopped_on_every_replica_and_after_a_restart(rig: Rig) -> None:
    await rig.deploy()
    release = f"{rig.app_id}-1"
    behind = IngressRouter(RouteTable(), Counters())  # a replica that missed the stop message
    behind.route(SHOP, [Backend(release, 100, ("127.0.0.1:20001",))])
    await rig.deploys.stop(await rig.app())
    assert await rig.runtime.running(release) == []
    assert rig.router.ingress.table.stopped(SHOP)
    assert await rig.deploys.resync_routes(behind) == 1
    assert behind.table.stopped(SHOP)  # its ingress answers 503 "stopped" too

    # the server restarts with an instance still running (say the CLI stopped it meanwhile)
    restarted = FakeRouter()
    rig.deploys.router = restarted
    rig.runtime.adoptable[release] = {0: fakes.instance(release, 0, "127.0.0.1:20009")}
    await rig.deploys.reconcile()
    assert await rig.runtime.running(release) == []
    assert restarted.ingress.table.stopped(SHOP)

    with pytest.raises(FailedPrecondition, match="stopped"):
        await rig.deploy()
    await rig.deploys.scale(await rig.app(), 3, by=rig.alice)  # for the next start
    started = await rig.deploys.start(await rig.app())
    assert (started.stopped, started.running) == (False, 3)
    assert restarted.serves(SHOP_HOST) == release
    assert await rig.states() == {1: "live"}  # no new release for any of it


async def test_a_restart_runs_the_apps_current_env_and_records_it(rig: Rig) -> None:
    """restart_app is what an agent calls after env_vars: it ran the release's frozen env."""
    assert await rig.deploy() == "live"
    started: list[dict[str, str]] = []
    start = rig.runtime.start

    async def recording(release: Release, index: int) -> Instance:
        started.append(dict(release.env))
        return await start(release, index)

    rig.runtime.start = recording  # type: ignore[method-assign]
    await rig.env.set_vars(rig.alice, rig.app_id, {"GREETING": "hello again"}, secret=False)
    record = await rig.deploys.restart(await rig.app())
    assert started, "the restart started no instance"
    assert all(env.get("GREETING") == "hello again" for env in started)
    app = (await rig.apps.get(rig.alice, rig.app_id)).app
    assert rig.deploys.release_of(app, record).env.get("GREETING") == "hello again"
    assert not app.needs_restart


async def test_a_deploy_cancelled_again_while_it_unwinds_still_ends_cancelled(rig: Rig) -> None:
    """A replica's deploy can be cancelled twice (the task's cancel and the relayed deploy
    cancel): the second must not cut the unwinding short, or the deployment is left in
    progress and ends ``failed`` as an orphan once the lease is let go."""
    await rig.deploy()
    starting, stopping, let_stop = asyncio.Event(), asyncio.Event(), asyncio.Event()
    stop = rig.runtime.stop

    async def never_healthy(release: Release, instance: Instance, within_s: float) -> Readiness:
        starting.set()
        await asyncio.Event().wait()
        return Readiness(False, "never")

    async def slow_stop(release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        stopping.set()
        await let_stop.wait()
        await stop(release_id, index, grace_s)

    rig.runtime.wait_ready = never_healthy  # type: ignore[method-assign]
    rig.runtime.stop = slow_stop  # type: ignore[method-assign]
    app, record = await rig.deploys.create(await rig.app(), rig.alice.user, "rolling")
    run = asyncio.ensure_future(rig.deploys.run(app, record))
    async with asyncio.timeout(10):
        await starting.wait()
        run.cancel()
        await stopping.wait()  # unwinding: the new release is being stopped
        run.cancel()  # the second cancel
        await asyncio.sleep(0)
        let_stop.set()
        with pytest.raises(asyncio.CancelledError):
            await run
    assert await rig.states() == {1: "live", 2: "cancelled"}
    assert rig.router.weights(SHOP) == {f"{rig.app_id}-1": 100}
    assert await rig.runtime.running(f"{rig.app_id}-2") == []
