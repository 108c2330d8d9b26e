"""DeployService: deploy, roll back, restart and list deployments; reconcile after a restart.

One deployment at a time per app: a second deploy while one is in progress is refused with
``conflict`` (naming the one in progress), rather than queued, so an agent always knows what
will run. Every step is written to the store before it is announced.

Whatever replica runs it, a deploy (like a rollback or restart, :mod:`.operations`) holds the
app's lease (:mod:`.locks`) from its creation to its end, and every deployment write it makes
carries the lease's fence: a replica paused or cut off past its lease finds its writes refused
and stops quietly; the lease's next holder fails the deployment it left (:meth:`reclaim`).
The partial unique index ``uq_deployments_in_progress`` backs this up: two deployments in
progress for one app cannot both be written.

Traffic moves on the app's route key (``Release.route``, from :mod:`appdeck.model.hostnames`),
never on its name: another tenant's app of the same name has another key.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from appdeck.common.errors import (
    AppDeckError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
)
from appdeck.common.unwinding import to_the_end
from appdeck.model import hostnames
from appdeck.model.release import AppSpec
from appdeck.model.specs import STRATEGIES
from appdeck.platform import env as frozen_env
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.aborts import RoutesFirst, abort_held, plan_abort
from appdeck.platform.deploy.builds import build
from appdeck.platform.deploy.cancels import CancelRelay
from appdeck.platform.deploy.locks import AppLocks, Hold
from appdeck.platform.deploy.ports import (
    Backend,
    BuildFailed,
    Driver,
    Instance,
    Release,
    RouterPort,
)
from appdeck.platform.deploy.running import refuse_if_stopped
from appdeck.platform.deploy.watch import NOT_WATCHED, DeployWatch, DeployWatcher, outcome_of
from appdeck.platform.env import EnvService
from appdeck.platform.sources import SourceRoots
from appdeck.storage.app_locks import AppLockStore, Fenced
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord, DeploymentStore

log = logging.getLogger("appdeck.deploy")

Progress = Callable[[str, int | None], Awaitable[None]]

MAX_HANDED = 1024
"""Leases taken by :meth:`DeployService.create` waiting for their :meth:`~DeployService.run`."""
BUSY_LOOKS = 10
BUSY_LOOK_S = 0.1
"""A deploy refused because the app's lease is held looks for the deployment in progress this
many times, this far apart (see ``DeployService._busy``)."""
ORPHANED = (
    "The server driving this deployment stopped (it restarted, or lost its lock on the app); "
    "the live release kept serving. Deploy again."
)


async def _quiet(message: str, traffic: int | None) -> None:
    return None


class GitSource(Protocol):
    """An app's connected repository as a deployment's source (``platform.repos``)."""

    async def connected(self, app_id: int) -> bool: ...

    async def source(self, app: AppRecord, commit: str | None) -> dict[str, Any] | None:
        """A checkout at ``commit`` (default: the branch's head) as a deployment's ``source``
        (``path``, ``commit``, ``message``, ...); ``None`` when no repository is connected."""


class DeployService:
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
        gate: Callable[[int, str | None], Awaitable[None]] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        locks: AppLocks | None = None,
        watcher: DeployWatcher = NOT_WATCHED,
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
        self.runs: dict[tuple[int, int], asyncio.Future[Any]] = {}
        """The deploys this process drives, by (app, number): what a cancel cancels."""
        self.cancels = CancelRelay(self.runs)
        """Cancels for deploys another replica drives (:mod:`.cancels`)."""
        self._aside: set[asyncio.Task[None]] = set()
        self.git = git
        """A connected repository is the app's source (``RepoSources``; None: no git)."""
        self.gate = gate
        """CI's require_green check of the commit deployed (``CIGate``; None: no CI)."""

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

    # -- reading --------------------------------------------------------------------------

    async def live(self, app_id: int) -> DeploymentRecord | None:
        found = await self.store.for_app(app_id, states=[states.LIVE], limit=1)
        return found[0] if found else None

    # -- deploying ------------------------------------------------------------------------

    async def create(
        self, app: AppRecord, by: str, strategy: str | None, commit: str | None = None
    ) -> tuple[AppRecord, DeploymentRecord]:
        """Check, freeze the spec, env and source, and record a queued deployment by user
        ``by``. The source is the connected repository at ``commit`` (default: its branch's
        head) if the app has one, else its ``source_path``. The caller checked the role
        (:class:`~.deployments.Deployments`)."""
        app_id = app.id
        refuse_if_stopped(app, "a deploy")
        chosen = strategy or str(app.spec.get("default_strategy", "rolling"))
        if chosen not in STRATEGIES:
            raise InvalidArgument(
                f"unknown strategy {chosen!r}", hint=f"one of {', '.join(STRATEGIES)}"
            )
        git = self.git is not None and await self.git.connected(app_id)
        if not git and commit is not None:
            raise FailedPrecondition(
                "a commit is deployed from a connected repository; this app has none",
                hint="connect_repo first",
            )
        if not git and not app.spec.get("source_path"):
            raise FailedPrecondition(
                "the app has no source_path",
                hint="set_app_spec with spec.source_path, or connect_repo, first",
            )
        if app.spec.get("runtime") != "static" and not app.spec.get("run_command"):
            raise FailedPrecondition(
                "the app has no run_command", hint="set_app_spec with spec.run_command"
            )
        running = await self.store.for_app(app_id, states=sorted(states.IN_PROGRESS), limit=1)
        if running and not await self.reclaim(app, running[0]):
            raise _in_progress(running[0])
        unroutable = hostnames.unroutable_reason(app.name, app.tenant_id)
        if unroutable is not None:  # only apps made before the hostname rule can get here
            raise FailedPrecondition(unroutable, hint="rename the app (manage_app update)")
        source = await self._resolve(app, commit) if git else {"path": str(self._source(app))}
        if self.gate is not None:
            found = source.get("commit")
            await self.gate(app_id, found if isinstance(found, str) else None)
        env = await self._env.resolved(app_id, dict(app.spec.get("env") or {}))
        secret = await self._env.secret_names(app_id)  # its builds go without them
        sealed = self._sealer.seal(frozen_env.freeze(env, secret))
        return app, await self._queue(app, by, chosen, app.spec, sealed, source)

    async def restart_as_release(
        self, app: AppRecord, by: str, progress: Progress = _quiet
    ) -> DeploymentRecord:
        """A restart where the driver cannot restart one instance in place (its capabilities
        say ``in_place_restart`` False: a Deployment's pods are the cluster's): the live
        release again as a new deployment (a new number and release id) with the app's env as
        it is now, by the app's strategy, through :meth:`run` like any deploy. Its spec and
        source are the live release's frozen ones. ``by``: who asked (the new record's
        ``created_by``)."""
        app_id = app.id
        refuse_if_stopped(app, "a restart")
        live = await self.live(app_id)
        if live is None:
            raise FailedPrecondition(
                "the app has no live release to restart", hint="deploy_app first"
            )
        _, sealed = await self.fresh_env(app_id, live)  # the run thaws it from the record
        strategy = str(app.spec.get("default_strategy", "rolling"))
        record = await self._queue(app, by, strategy, live.spec, sealed, live.source, live)
        await progress(_restarted(live, record), None)
        return await self.run(app, record, progress)

    async def _queue(
        self,
        app: AppRecord,
        by: str,
        strategy: str,
        spec: dict[str, Any],
        sealed_env: str,
        source: dict[str, Any],
        restart_of: DeploymentRecord | None = None,
    ) -> DeploymentRecord:
        """Record a queued deployment under the app's lease, taken here and handed to its
        :meth:`run`; :class:`Conflict` when a deploy, rollback or restart holds it (here or on
        another replica). ``restart_of``: the live release it restarts as a new one (its
        ``previous``, and a message that says so); else ``previous`` is the live one now."""
        with self.watcher.lease():
            held = await self.locks.try_take(app.id)
        if held is None:
            raise await self._busy(app.id)
        try:
            live = restart_of or await self.live(app.id)
            record = await self.store.create(
                app_id=app.id,
                strategy=strategy,
                spec=spec,
                env=sealed_env,
                source=source,
                created_by=by,
                previous=live.number if live else None,
                instance_id=self._instance,
                state=states.QUEUED,
            )
            if restart_of is not None:
                said = _restarted(restart_of, record)
                record = await self.store.update(
                    app.id, record.number, message=said, lease=held.lease
                )
        except BaseException:
            await held.release()
            raise
        self._hand(record, held)
        await self.announce(app, record)
        return record

    async def _busy(self, app_id: int) -> Conflict:
        """Why the app's lease is held: the deployment in progress, named; else a rollback or
        restart. A deploy takes the lease a moment before it records its deployment, so an
        app found without one is looked at again for up to a second before saying so."""
        for look in range(BUSY_LOOKS):
            running = await self.store.for_app(app_id, states=sorted(states.IN_PROGRESS), limit=1)
            if running:
                return _in_progress(running[0])
            if look + 1 < BUSY_LOOKS:
                await asyncio.sleep(BUSY_LOOK_S)
        return DeployBusy(
            "a rollback or restart of this app is under way",
            hint="wait for it (list_deployments) before deploying again",
        )

    def _hand(self, record: DeploymentRecord, held: Hold) -> None:
        """Keep the lease ``create`` took for the deployment's ``run`` (which renews it)."""
        while len(self._handed) >= MAX_HANDED:  # never run: their leases just expire
            self._handed.pop(next(iter(self._handed)))
        self._handed[(record.app_id, record.number)] = held

    async def _resolve(self, app: AppRecord, commit: str | None) -> dict[str, Any]:
        assert self.git is not None
        found = await self.git.source(app, commit)
        if found is None:  # disconnected since the check above
            raise FailedPrecondition("the app's repository was disconnected", hint="deploy again")
        return found

    def _source(self, app: AppRecord) -> Path:
        """The app's source, checked again now: the folder may have been swapped (for a link
        out, say) since the spec named it, or the operator may have narrowed the roots."""
        try:
            return self._sources.check(app.tenant_id, app.spec["source_path"])
        except InvalidArgument as exc:
            raise FailedPrecondition(
                f"the app's source no longer passes the source check: {exc.message}",
                hint=exc.hint,
            ) from None

    async def run(
        self, app: AppRecord, record: DeploymentRecord, progress: Progress = _quiet
    ) -> DeploymentRecord:
        """Drive a created deployment to live, failed or rolled_back, under the app's lease
        (the one ``create`` took). A deployment whose lease was taken over meanwhile is left
        to the new holder: it is returned as it stands, untouched."""
        held = self._handed.pop((app.id, record.number), None)
        if held is None:
            with self.watcher.lease():
                held = await self.locks.try_take(app.id)
        if held is None or not await held.confirm():
            log.warning("deployment %s: the app's lock is another's; not run", record.release_id)
            return await self.store.get(app.id, record.number) or record
        held.start()
        key = (app.id, record.number)
        current = asyncio.current_task()
        if current is not None:
            self.runs[key] = current
        try:
            with self.watcher.watch("deploy", app.id, record.number, record.strategy) as watch:
                record = await self._run(app, record, progress, held, watch)
                watch.ended(outcome_of(record.state), record.status_message or "")
            return record
        except Fenced as exc:
            log.warning(
                "deployment %s stopped: %s (the app's new lock holder owns it)",
                record.release_id,
                exc,
            )
            return await self.store.get(app.id, record.number) or record
        finally:
            self.runs.pop(key, None)
            await to_the_end(held.release())  # at once for the next deploy, cancels or not

    async def _run(
        self,
        app: AppRecord,
        record: DeploymentRecord,
        progress: Progress,
        held: Hold,
        watch: DeployWatch,
    ) -> DeploymentRecord:
        new = self.release_of(app, record)
        old_record = await self.store.get(app.id, record.previous) if record.previous else None
        old = (
            self.release_of(app, old_record)
            if old_record and old_record.state == states.LIVE
            else None
        )
        old_instances = await self.instances_of(old) if old else []

        async def step(message: str, traffic: int | None = None, state: str | None = None) -> None:
            nonlocal record
            held.check()
            await self.router.published()  # the other replicas route as this one before it goes on
            record = await self.store.update(
                app.id,
                record.number,
                state=state,
                message=message,
                traffic=traffic,
                lease=held.lease,
            )
            await self.announce(app, record)
            await progress(message, traffic)

        async def abort() -> None:
            with watch.phase("shift", traffic=0):  # traffic back to the old release
                await abort_held(held, self.runtime, self.router, new, old, old_instances)

        try:
            await step(
                "Building: copying the source and running the build command", state=states.BUILDING
            )
            with watch.phase("build"):
                await build(self.runtime, new)
            await step(f"Starting the new release ({record.strategy})", 0, state=states.STARTING)
            plan = rollout.Rollout(
                self.runtime, self.router, new, old, old_instances, step, self.sleep, watch=watch
            )
            await self._strategy(record, plan, step)
        except Fenced:
            raise  # quietly: whoever holds the app now cleans up
        except (BuildFailed, rollout.RolloutFailed) as exc:
            await abort()
            await step(f"Failed: {exc}", 0, state=states.FAILED)
            return record
        except rollout.CanaryRejected as exc:
            watch.rejected(exc.reason)
            await abort()
            await step(f"Rolled back automatically: {exc}", 0, state=states.ROLLED_BACK)
            return record
        except asyncio.CancelledError:
            if not held.lost:  # a second cancel (task and relay both ask) must not cut this short
                await to_the_end(self._unwind_cancelled(new, old, old_instances, step))
            raise
        except AppDeckError as exc:  # refused by a rule (a checkout, a path): said as it is
            log.warning("deployment %s failed: %s", record.release_id, exc.message)
            await abort()
            await step(f"Failed: {exc.message}", 0, state=states.FAILED)
            return record
        except Exception:  # a bug: the log has the traceback; the caller never a class name
            log.exception("deployment %s failed", record.release_id)
            await abort()
            await step("Failed: internal error (the server's log has the details)", 0,
                       state=states.FAILED)  # fmt: skip
            return record
        await step(f"Live: {app.name} serves release {record.number}", 100, state=states.LIVE)
        if old_record is not None and old_record.state == states.LIVE:
            keep_warm = record.strategy == "blue_green"
            message = "Superseded" + (" (kept warm for an instant rollback)" if keep_warm else "")
            held.check()
            old_after = await self.store.update(
                app.id,
                old_record.number,
                state=states.SUPERSEDED,
                message=message,
                traffic=0,
                lease=held.lease,
            )
            await self.announce(app, old_after)
            if not keep_warm:
                await self.runtime.stop(old_record.release_id)
        await self.apps.store.update(app.id, needs_restart=False)
        return record

    async def _unwind_cancelled(
        self,
        new: Release,
        old: Release | None,
        old_instances: list[Instance],
        step: Callable[[str, int | None, str | None], Awaitable[None]],
    ) -> None:
        await plan_abort(self.runtime, self.router, new, old, old_instances)
        with contextlib.suppress(Fenced):
            await step("Cancelled; the live release kept serving", 0, states.CANCELLED)

    async def _strategy(
        self,
        record: DeploymentRecord,
        plan: rollout.Rollout,
        step: Callable[[str, int | None, str | None], Awaitable[None]],
    ) -> None:
        if record.strategy == "recreate":
            await rollout.recreate(plan)
        elif record.strategy == "rolling":
            await rollout.rolling(plan)
        elif record.strategy == "blue_green":
            await rollout.blue_green(plan)
        else:
            canary = plan.new.spec.canary

            async def enter_canary() -> None:
                await step(
                    "Canary: analysing the new release on a share of traffic", 0, states.CANARY
                )

            await rollout.canary(
                plan,
                steps=canary.plan(),
                window_s=canary.analysis_window_s,
                max_error_rate=canary.max_error_rate,
                enter=enter_canary,
            )

    # -- helpers --------------------------------------------------------------------------

    async def reclaim(self, app: AppRecord, record: DeploymentRecord) -> bool:
        """End a deployment in progress that nobody drives any more: only when the app's
        lease is free (its driver died, or was paused past the lease), never one a live
        replica runs. Its release is stopped, it ends ``failed``, and the app's route goes
        back to the live release. False when the lease is held (the deployment is alive)."""
        held = await self.locks.try_take(app.id)
        if held is None:
            return False
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
        self, release: Release, progress: Progress = _quiet, watch: DeployWatch = NOT_WATCHED
    ) -> rollout.Rollout:
        """A rollout of ``release`` from nothing (starting it cold, or replacing instances)."""
        return rollout.Rollout(
            self.runtime, self.router, release, None, [], progress, self.sleep, watch=watch
        )

    async def fresh_env(self, app_id: int, record: DeploymentRecord) -> tuple[dict[str, str], str]:
        """The env a restart of ``record`` runs with: the app's env vars now, over the release's
        frozen spec defaults; and that env frozen and sealed, for the record."""
        env = await self._env.resolved(app_id, dict(record.spec.get("env") or {}))
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
        found = await self._resolve(app, commit)
        return dataclasses.replace(release, source_path=Path(str(found["path"])))

    async def announce(self, app: AppRecord, record: DeploymentRecord) -> None:
        """Tell subscribers a deployment changed."""
        await self._feed.emit(Change("deployment.updated", app.tenant_id, app.id, record.number))

    def backends_of(self, release_id: str, upstreams: list[str]) -> list[Backend]:
        return [Backend(release_id, 100, tuple(upstreams))]


class DeployBusy(Conflict):
    """The app's lease is held: a deployment (or a rollback or restart) is under way. A
    deploy asked by a push waits for it (:func:`appdeck.platform.deploy.queued.when_free`)."""


def _in_progress(record: DeploymentRecord) -> Conflict:
    return DeployBusy(
        f"deployment {record.number} of this app is still {record.state}",
        hint="wait for it (list_deployments) before deploying again",
    )


def _restarted(live: DeploymentRecord, record: DeploymentRecord) -> str:
    """The step message of a restart as a new release (no ``in_place_restart``)."""
    return (
        f"Restart of release {live.number} as release {record.number} ({record.strategy}), "
        "with the app's current env: this runtime cannot restart an instance in place"
    )


from appdeck.platform.deploy.operations import Operations as Operations  # noqa: E402
