"""The deploy engine's state and the reads every one of its concerns shares: its
collaborators, the release a deployment record describes, the running instances of a
release, the app's live release and its backends, and the end of a deployment nobody drives.

:class:`~.engine.DeployEngine` is assembled from mixins over :class:`EngineCore`, one per
concern: deploying (:mod:`.deploying`), rollback and restart (:mod:`.operations`), stop, start,
scale and cancel (:mod:`.running`), and what a server does on its own (:mod:`.reconcile`).

Traffic moves on the app's route key (``Release.route``, from :mod:`appdeck.model.hostnames`),
never on its name: another tenant's app of the same name has another key.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Final, Protocol

from appdeck.common.errors import Conflict, FailedPrecondition, InvalidArgument
from appdeck.ingress.routes import STOPPED
from appdeck.model import hostnames
from appdeck.model.release import AppSpec
from appdeck.platform import env as frozen_env
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.aborts import RoutesFirst
from appdeck.platform.deploy.cancels import CancelRelay
from appdeck.platform.deploy.locks import AppLocks, Hold
from appdeck.platform.deploy.policy import CorePolicy, DeployPolicy
from appdeck.platform.deploy.ports import Backend, Driver, Instance, Release, RouterPort
from appdeck.platform.deploy.watch import NOT_WATCHED, DeployWatch, DeployWatcher
from appdeck.platform.env import EnvService
from appdeck.platform.sources import SourceRoots
from appdeck.storage.app_locks import AppLockStore, Fenced
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord, DeploymentStore

log = logging.getLogger("appdeck.deploy")

Progress = Callable[[str, int | None], Awaitable[None]]

ORPHANED: Final = (
    "The server driving this deployment stopped (it restarted, or lost its lock on the app); "
    "the live release kept serving. Deploy again."
)
STOPPED_ROUTE: Final = (Backend(STOPPED, 0, ()),)
"""A stopped app's route: the ingress answers 503 "stopped"."""


async def quiet(message: str, traffic: int | None) -> None:
    """No progress to report."""


class GitSource(Protocol):
    """An app's connected repository as a deployment's source (``platform.repos``)."""

    async def connected(self, app_id: int) -> bool: ...

    async def source(self, app: AppRecord, commit: str | None) -> dict[str, Any] | None:
        """A checkout at ``commit`` (default: the branch's head) as a deployment's ``source``
        (``path``, ``commit``, ``message``, ...); ``None`` when no repository is connected."""


class CommitGate(Protocol):
    """CI's require_green check of the commit deployed (``CIGate``): raises to refuse."""

    async def __call__(self, app_id: int, commit: str | None, /) -> None: ...


class EngineCore:
    def __init__(
        self,
        apps: AppService,
        env: EnvService,
        store: DeploymentStore,
        runtime: Driver,
        router: RouterPort,
        feed: ChangeFeed,
        sealer: Sealer,
        *,
        sources: SourceRoots,
        instance_id: str,
        git: GitSource | None = None,
        gate: CommitGate | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        locks: AppLocks | None = None,
        watcher: DeployWatcher = NOT_WATCHED,
        policy: type[DeployPolicy] = CorePolicy,
    ) -> None:
        self.apps = apps
        self._sources = sources
        self._env = env
        self.store = store
        self.runtime: Driver = RoutesFirst(runtime, lambda: self.router)
        """The runtime driver, stopping an instance only once this replica's route changes reached
        the others (their ingresses must not send traffic to it)."""
        self.router = router
        self._feed = feed
        self._sealer = sealer
        self._instance = instance_id
        self.sleep = sleep
        self.watcher = watcher
        """Told of every run, its phases and its end (metrics, traces: :mod:`.watch`)."""
        self.locks = (
            locks if locks is not None else AppLocks(AppLockStore(store.engine), instance_id)
        )
        """The app leases (cluster-wide: the database's ``app_locks``)."""
        self._handed: dict[tuple[int, int], Hold] = {}
        """Leases ``create`` took, for the deployment's ``run`` (:mod:`.deploying`)."""
        self.runs: dict[tuple[int, int], asyncio.Future[Any]] = {}
        """The deploys this process drives, by (app, number): what a cancel cancels."""
        self.cancels = CancelRelay(self.runs)
        """Cancels for deploys another replica drives (:mod:`.cancels`)."""
        self._aside: set[asyncio.Task[None]] = set()
        self.git = git
        """A connected repository is the app's source (``RepoSources``; None: no git)."""
        self.gate = gate
        """CI's require_green check of the commit deployed (``CIGate``; None: no CI)."""
        self.policy = policy
        """The rules a deployment's transitions go through (:mod:`.policy`)."""

    def background(self, work: Awaitable[None]) -> None:
        """Run clean-up work (stopping a release nobody routes to) without making the caller
        wait; failures are logged."""

        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("background deploy work failed")

        task = asyncio.create_task(run())
        self._aside.add(task)
        task.add_done_callback(self._aside.discard)

    async def settle(self) -> None:
        """Wait for background work (tests, shutdown)."""
        if self._aside:
            await asyncio.wait(set(self._aside), timeout=30)

    async def live(self, app_id: int) -> DeploymentRecord | None:
        found = await self.store.for_app(app_id, states=[states.LIVE], limit=1)
        return found[0] if found else None

    async def in_progress(self, app_id: int) -> DeploymentRecord | None:
        """The app's deployment in progress, if any."""
        found = await self.store.for_app(app_id, states=sorted(states.IN_PROGRESS), limit=1)
        return found[0] if found else None

    async def reclaim_orphan(self, app: AppRecord, record: DeploymentRecord) -> bool:
        """End a deployment in progress that nobody drives any more: only when the app's
        lease is free (its driver died, or was paused past the lease), never one a live
        replica runs. Its release is stopped, it ends ``failed``, and the app's route goes
        back to the live release. False when the lease is held (the deployment is alive)."""
        held = await self.locks.try_take(app.id)
        if held is None:
            return False
        # Renewed while it works: the stop below waits for the route broadcast, which takes
        # as long as the data plane does (a paused replica's HAProxy: the whole bound). An
        # unrenewed lease ran out meanwhile, another replica took the app, this write was
        # fenced, and every sweep started over: the orphan was never ended.
        held.start()
        try:
            current = await self.store.get(app.id, record.number)
            if current is None or current.state not in states.IN_PROGRESS:
                return True  # it ended meanwhile
            # Traffic goes back to the live release on every replica first; the runtime's
            # stop waits for that broadcast (see aborts.RoutesFirst) before any signal is sent.
            await self.route_live(app)
            await self.runtime.stop(current.release_id)
            failed = await self.store.update(
                app.id,
                current.number,
                state=states.FAILED,
                message=ORPHANED,
                traffic=0,
                lease=held.lease,
            )
            await self.announce(app, failed)
            log.warning("deployment %s was orphaned: failed it", current.release_id)
            return True
        except Fenced:
            log.warning(
                "app %s: lost its lease while ending orphaned deployment %s",
                app.id,
                record.release_id,
            )
            return False
        finally:
            await held.release()

    async def route_live(self, app: AppRecord) -> None:
        """Route the app's key to its live release's running instances (adopting them if
        this process does not know them), or to nothing; every replica follows."""
        route = hostnames.route_label(app.name, app.tenant_id)
        backends = await self.live_backends(app)
        if backends:
            self.router.route(route, backends)
        else:
            self.router.unroute(route)

    async def live_backends(self, app: AppRecord) -> list[Backend]:
        """The app's live release (as the database says) on its running instances, adopted
        if this process does not know them yet; ``[]`` when none is live or running."""
        live = await self.live(app.id)
        if live is None:
            return []
        instances = await self.instances_of(self.release_of(app, live))
        if not instances:
            return []
        upstreams = tuple(i.upstream for i in instances)
        return [Backend(instances[0].release_id, 100, upstreams)]

    async def instances_of(self, release: Release) -> list[Instance]:
        """The release's running instances, by index: the ones this process runs, else the
        ones it adopts (another replica on this host started them: the app's processes
        belong to the host, not to a replica)."""
        instances = await self.runtime.running(release.release_id)
        if not instances and self.runtime.capabilities().host_processes:
            instances = (await self.runtime.recover(release)).adopted
        return sorted(instances, key=lambda i: i.index)

    def plan(
        self, release: Release, progress: Progress = quiet, watch: DeployWatch = NOT_WATCHED
    ) -> rollout.Rollout:
        """A rollout of ``release`` from nothing (starting it cold, or replacing instances)."""
        return rollout.Rollout(
            self.runtime, self.router, release, None, [], progress, self.sleep, watch=watch
        )

    def route(self, release: Release, instances: list[Instance]) -> None:
        """Route the release's key to ``instances`` (all traffic); every replica follows."""
        upstreams = tuple(i.upstream for i in instances)
        self.router.route(release.route, [Backend(release.release_id, 100, upstreams)])

    async def fresh_env(self, app_id: int, record: DeploymentRecord) -> tuple[dict[str, str], str]:
        """The env a restart of ``record`` runs with: the app's env vars now, over the release's
        frozen spec defaults; and that env frozen and sealed, for the record."""
        return await self.env_of(app_id, record.spec.get("env"))

    async def env_of(self, app_id: int, defaults: Any) -> tuple[dict[str, str], str]:
        """The app's env vars now over the spec's ``defaults``; and that env frozen and sealed
        (the secret ones named: a release's builds go without them)."""
        env = await self._env.resolved(app_id, dict(defaults or {}))
        secret = await self._env.secret_names(app_id)
        return env, self._sealer.seal(frozen_env.freeze(env, secret))

    def release_of(self, app: AppRecord, record: DeploymentRecord) -> Release:
        """The release a deployment record describes (its frozen spec and env)."""
        env, secret = frozen_env.thaw(self._sealer.open(record.env))
        route = hostnames.route_label(app.name, app.tenant_id)
        # The copy reads the path as checked at create() (links resolved), and opens it
        # without following links: a folder swapped for a link since is refused, not read.
        source = record.source.get("path") or record.spec.get("source_path") or "/nonexistent"
        return Release(
            app.id,
            app.name,
            record.number,
            AppSpec.from_dict(record.spec),
            env,
            route,
            Path(str(source)),
            secret_names=secret,
        )

    async def startable(self, app: AppRecord, record: DeploymentRecord) -> Release:
        """The release of ``record``, ready to start cold: a git checkout pruned since (only
        recent ones are kept) is made again at the same commit from the connected repository."""
        release = self.release_of(app, record)
        if record.source.get("kind") != "git" or await asyncio.to_thread(
            release.source_path.is_dir
        ):
            return release
        commit = record.source.get("commit")
        if self.git is None or not isinstance(commit, str) or not await self.git.connected(app.id):
            raise FailedPrecondition(
                f"release {record.number}'s checkout of {commit} is gone and its repository "
                "is no longer connected",
                hint="connect_repo again, or deploy_app a new release",
            )
        found = await self.resolve(app, commit)
        return dataclasses.replace(release, source_path=Path(str(found["path"])))

    async def resolve(self, app: AppRecord, commit: str | None) -> dict[str, Any]:
        """The connected repository's checkout at ``commit`` (default: the branch's head)."""
        assert self.git is not None
        found = await self.git.source(app, commit)
        if found is None:  # disconnected since the check above
            raise FailedPrecondition("the app's repository was disconnected", hint="deploy again")
        return found

    def checked_source(self, app: AppRecord) -> Path:
        """The app's source, checked again now: the folder may have been swapped (for a link
        out, say) since the spec named it, or the operator may have narrowed the roots."""
        try:
            return self._sources.check(app.tenant_id, app.spec["source_path"])
        except InvalidArgument as exc:
            raise FailedPrecondition(
                f"the app's source no longer passes the source check: {exc.message}",
                hint=exc.hint,
            ) from None

    async def announce(self, app: AppRecord, record: DeploymentRecord) -> None:
        """Tell subscribers a deployment changed."""
        await self._feed.emit(Change("deployment.updated", app.tenant_id, app.id, record.number))


def route_of(app: AppRecord) -> str:
    return hostnames.route_label(app.name, app.tenant_id)


@contextlib.contextmanager
def fenced(app_id: int) -> Iterator[None]:
    """A write refused by the app's lease: another replica took the app over."""
    try:
        yield
    except Fenced:
        raise Conflict(
            f"app {app_id} was taken over by another operation (this one lost its lock)",
            hint="list_deployments shows where it stands",
        ) from None
