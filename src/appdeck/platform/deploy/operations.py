"""Rollback, restart and start-up reconciliation: the operations on an app's releases
besides a deploy, on :class:`~appdeck.platform.deploy.engine.DeployService`'s public
collaborators (its store, runtime, router, app locks and release factory).

A rollback or restart holds the app's lease (:mod:`.locks`) like a deploy, waiting for it a
bounded time, and its deployment writes carry the fence: refused once another holder took the
app over (then ``conflict``). Reconciling ends only deployments whose lease is free: one a
live replica drives is left alone.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Protocol

from appdeck.common.errors import AppDeckError, FailedPrecondition, NotFound
from appdeck.model import hostnames
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.builds import build
from appdeck.platform.deploy.locks import Hold
from appdeck.platform.deploy.ports import Backend, BuildFailed, Instance, Release
from appdeck.platform.deploy.running import STOPPED_ROUTE, Running, fenced, refuse_if_stopped
from appdeck.platform.deploy.watch import NO_STRATEGY, RESTART_STRATEGY, DeployWatch
from appdeck.storage.app_locks import Fenced
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord

if TYPE_CHECKING:
    from appdeck.platform.deploy.engine import DeployService, Progress


class RouteView(Protocol):
    """This replica's route table (an :class:`~.ingress_router.IngressRouter`)."""

    def serving(self, route: str) -> frozenset[str] | None: ...
    def routes(self) -> list[str]: ...
    def apply(self, route: str, backends: list[Backend] | None) -> None: ...


log = logging.getLogger("appdeck.deploy")


async def _quiet(message: str, traffic: int | None) -> None:
    """No progress to report."""


async def _announce(s: DeployService, app: AppRecord, *records: DeploymentRecord) -> None:
    """Tell subscribers of each record in turn (a rollback's, once it is in effect)."""
    for record in records:
        await s.announce(app, record)


class Operations:
    """Rollback, restart and start-up reconciliation (kept apart from the deploy path)."""

    def __init__(self, service: DeployService) -> None:
        self._s = service
        self.running = Running(service)
        """Stop, start, scale and cancel (:mod:`.running`)."""

    async def rollback(
        self,
        app: AppRecord,
        number: int | None = None,
        progress: Progress = _quiet,
    ) -> DeploymentRecord:
        s, app_id = self._s, app.id
        refuse_if_stopped(app, "a rollback")
        async with s.locks.hold(app_id, timed=s.watcher.lease()) as held:
            live, target = await self._rollback_target(app_id, number)
            await s.apps.check_release(app, target.spec)  # ceilings and quotas hold again
            with s.watcher.watch("rollback", app_id, target.number, NO_STRATEGY) as watch:
                return await self._bring_back(app, live, target, held, progress, watch)

    async def _rollback_target(
        self, app_id: int, number: int | None
    ) -> tuple[DeploymentRecord, DeploymentRecord]:
        """The live deployment and the one a rollback brings back (``number``, default: the
        one before the live one), checked."""
        s = self._s
        live = await s.live(app_id)
        if live is None:
            raise FailedPrecondition("the app has no live release to roll back from")
        target_number = number if number is not None else live.previous
        if target_number is None:
            raise FailedPrecondition("there is no earlier release to roll back to")
        target = await s.store.get(app_id, target_number)
        if target is None:
            raise NotFound(f"app {app_id} has no deployment {target_number}")
        if target.state not in (states.SUPERSEDED, states.ROLLED_BACK):
            raise FailedPrecondition(
                f"deployment {target.number} is {target.state}; only a superseded or "
                "rolled-back release can come back",
                hint="list_deployments shows which ones",
            )
        return live, target

    async def _bring_back(
        self,
        app: AppRecord,
        live: DeploymentRecord,
        target: DeploymentRecord,
        held: Hold,
        progress: Progress,
        watch: DeployWatch,
    ) -> DeploymentRecord:
        """Route the app to ``target``'s release (started again first if it is cold) and
        record it live again, ``live`` rolled back."""
        s, app_id = self._s, app.id
        release = s.release_of(app, target)
        instances = await s.instances_of(release)
        warm = len(instances) >= release.spec.instances
        if not warm:
            release = await s.startable(app, target)
            await progress(f"Release {target.number} is cold: starting it", 0)
            await s.runtime.stop(release.release_id)
            with watch.phase("build"):
                await build(s.runtime, release)
            plan = s.plan(release, progress, watch)
            for index in range(release.spec.instances):
                await plan.start_one(index)
            instances = plan.started
        with watch.phase("shift", traffic=100):
            s.router.route(
                release.route,
                [Backend(release.release_id, 100, tuple(i.upstream for i in instances))],
            )
        await s.router.published()  # issue 21: in effect (HAProxy too) before it is reported
        how = "instantly (it was still warm)" if warm else "after starting it again"
        with fenced(app_id):
            held.check()
            restored = await s.store.update(
                app_id,
                target.number,
                state=states.LIVE,
                message=f"Live again {how}",
                traffic=100,
                lease=held.lease,
            )
            left = await s.store.update(
                app_id,
                live.number,
                state=states.ROLLED_BACK,
                message=f"Rolled back to {target.number}",
                traffic=0,
                lease=held.lease,
            )
        s.background(s.runtime.stop(live.release_id))  # traffic already moved: stop it aside
        s.background(_announce(s, app, left, restored))  # recorded: listeners hear it aside
        await progress(f"Rolled back to release {target.number} {how}", 100)
        return restored

    async def restart(
        self, app: AppRecord, progress: Progress = _quiet, *, by: str = ""
    ) -> DeploymentRecord:
        """Rolling restart of the live release: a spare instance first, so even a single
        instance app keeps answering. A restart that fails leaves no spare behind (unless it
        is the only instance still healthy) and says so; the next one starts from whatever
        runs (extra instances above the release's count are stopped at its end). A driver
        without ``in_place_restart`` restarts the live release as a new one instead
        (:meth:`~.engine.DeployService.restart_as_release`), recorded as ``by``'s."""
        s, app_id = self._s, app.id
        if not s.runtime.capabilities().in_place_restart:
            return await s.restart_as_release(app, by, progress)
        refuse_if_stopped(app, "a restart")
        async with s.locks.hold(app_id, timed=s.watcher.lease()) as held:
            live = await s.live(app_id)
            if live is None:
                raise FailedPrecondition(
                    "the app has no live release to restart", hint="deploy_app first"
                )
            # the env vars as they are now (what a restart after env_vars is for); the spec
            # stays the release's
            env, sealed = await s.fresh_env(app_id, live)
            frozen = s.release_of(app, live)
            release = dataclasses.replace(frozen, env=env)
            with s.watcher.watch("restart", app_id, live.number, RESTART_STRATEGY) as watch:
                plan = s.plan(release, progress, watch)
                serving = {i.index: i for i in await s.instances_of(release)}
                try:
                    await self._roll(release, serving, plan, held, progress)
                except (BuildFailed, rollout.RolloutFailed) as exc:
                    raise await self._failed_restart(release, serving, plan, exc) from None
            with fenced(app_id):
                held.check()
                record = await s.store.update(
                    app_id,
                    live.number,
                    message="Restarted (rolling) with the app's current env",
                    env=sealed,
                    lease=held.lease,
                )
            await s.apps.store.update(app_id, needs_restart=False)
            await s.announce(app, record)
            return record

    async def _roll(
        self,
        release: Release,
        serving: dict[int, Instance],
        plan: rollout.Rollout,
        held: Hold,
        progress: Progress,
    ) -> None:
        """Replace instances 0..count-1 one by one behind a spare (at a free index above
        every running one), then retire the spare and any other extra instance."""
        s = self._s
        count = release.spec.instances
        spare = max([count - 1, *serving]) + 1
        serving[spare] = await plan.start_one(spare)
        for index in range(count):
            held.check()  # lost the app: stop restarting its instances
            serving.pop(index, None)  # out of the route, then stopped
            self._route(release, serving, plan.watch)
            await s.runtime.stop(release.release_id, index)
            serving[index] = await plan.start_one(index)
            await progress(f"Restarted instance {index + 1} of {count}", 100)
        await self._retire_extra(release, serving, plan.watch)

    async def _failed_restart(
        self,
        release: Release,
        serving: dict[int, Instance],
        plan: rollout.Rollout,
        exc: Exception,
    ) -> FailedPrecondition:
        """Clean up after a failed start: the instance that failed is stopped, and the
        spare too unless no other instance is left to answer."""
        s = self._s
        count = release.spec.instances
        failed = [i for i in plan.started if serving.get(i.index) is not i]
        for instance in failed:
            await s.runtime.stop(release.release_id, instance.index)
        kept_spare = not any(k < count for k in serving)
        if not kept_spare:
            await self._retire_extra(release, serving, plan.watch)
        elif serving:
            self._route(release, serving, plan.watch)
        said = f"the restart failed: {exc}; {len(serving)} instance(s) of {count} serve"
        if kept_spare and serving:
            said += " (the spare instance, kept so that the app still answers)"
        return FailedPrecondition(
            said,
            hint="tail_deploy_logs (kind runtime) shows why; restart_app again once fixed",
        )

    async def _retire_extra(
        self, release: Release, serving: dict[int, Instance], watch: DeployWatch
    ) -> None:
        """Route instances 0..count-1 only, then stop the others (spares)."""
        count = release.spec.instances
        extra = sorted(k for k in serving if k >= count)
        for index in extra:
            serving.pop(index)
        self._route(release, serving, watch)
        for index in extra:
            await self._s.runtime.stop(release.release_id, index)

    def _route(self, release: Release, serving: dict[int, Instance], watch: DeployWatch) -> None:
        upstreams = tuple(i.upstream for _, i in sorted(serving.items()))
        if upstreams:
            with watch.phase("shift", traffic=100):
                self._s.router.route(release.route, [Backend(release.release_id, 100, upstreams)])

    async def reclaim(self) -> int:
        """End the deployments in progress that nobody drives (their app's lease is free:
        the replica driving them died or stalled past it). Idempotent; any replica may run
        it, at start-up and every few seconds. Returns how many it ended."""
        s = self._s
        ended = 0
        for record in await s.store.in_states(states.IN_PROGRESS):
            app = await s.apps.store.get(record.app_id)
            if app is None:
                continue
            try:
                if await s.reclaim(app, record):
                    ended += 1
            except Exception:  # one app's trouble must not stop the others'
                log.exception("could not reclaim deployment %s", record.release_id)
        return ended

    async def reconcile(self, *, sole: bool = False) -> tuple[int, int]:
        """After a restart: deployments left in progress with nobody driving them end failed
        (the live release kept serving); live releases are re-adopted (or started again) and
        routed. ``sole``: this process is the only one on the database (the embedded
        default, no replicas), so leases of earlier processes are void at once rather than
        when they expire."""
        s = self._s
        if sole:
            await s.locks.store.expire_others(s.locks.instance_id)
        interrupted = await self.reclaim()
        restored = 0
        for record in await s.store.in_states([states.LIVE]):
            app = await s.apps.store.get(record.app_id)
            if app is None:
                continue
            unroutable = hostnames.unroutable_reason(app.name, app.tenant_id)
            if unroutable is not None:  # never route a label another app could also have
                log.error("not routing app %s after a restart: %s", app.id, unroutable)
                continue
            release = s.release_of(app, record)
            if app.stopped:  # stays stopped across restarts
                await self.running.keep_stopped(app, release)
                continue
            instances = {i.index: i for i in await s.runtime.running(release.release_id)}
            recovered = await s.runtime.recover(release)
            instances.update((i.index, i) for i in recovered.adopted)
            missing = [k for k in range(release.spec.instances) if k not in instances]
            held = await s.locks.try_take(app.id) if missing else None
            started = False
            if held is not None:  # else an operation on the app is under way: it decides
                held.start()
                try:
                    release = await s.startable(app, record)  # a checkout wiped: made again
                    await build(s.runtime, release)
                    plan = s.plan(release, _quiet)
                    for index in missing:
                        held.check()
                        instances[index] = await plan.start_one(index)
                        started = True
                except (BuildFailed, rollout.RolloutFailed, AppDeckError, Fenced) as exc:
                    log.error(
                        "could not restart %s after a server restart: %s", release.release_id, exc
                    )
                finally:
                    await held.release()
            if instances:
                upstreams = tuple(i.upstream for _, i in sorted(instances.items()))
                backends = [Backend(release.release_id, 100, upstreams)]
                if started:  # new instances: every replica routes them
                    s.router.route(release.route, backends)
                else:  # the others route it already (or a deploy of it is under way)
                    s.router.apply(release.route, backends)
                restored += 1
        await self.running.apply_intents()  # stops and starts the CLI asked for meanwhile
        return interrupted, restored

    async def resync_routes(self, view: RouteView) -> int:
        """The backstop of the ``routes`` messages (which a replica misses while its broadcast
        connection is down): every app with no deployment in progress is routed in this
        replica's table (``view``) as the database says (its live release, or nothing), and
        routes of apps that are gone are forgotten. Only this replica's table changes. Run
        after a broadcast reconnect and every few seconds. Returns how many routes changed."""
        s = self._s
        busy = {r.app_id for r in await s.store.in_states(states.IN_PROGRESS)}
        live = {r.app_id: r for r in await s.store.in_states([states.LIVE])}
        changed = 0
        known: set[str] = set()
        for app in await s.apps.store.all_apps():
            if hostnames.unroutable_reason(app.name, app.tenant_id) is not None:
                continue
            route = hostnames.route_label(app.name, app.tenant_id)
            known.add(route)
            if app.id in busy:
                continue  # its deploy's messages lead; the deploy's end is checked next time
            if app.stopped:
                if view.serving(route) != frozenset():
                    changed += 1
                view.apply(route, list(STOPPED_ROUTE))
                continue
            want = live.get(app.id)
            have = view.serving(route)
            if want is None:
                if have is None or have:
                    view.apply(route, [])
                    changed += 1
            elif have != frozenset({want.release_id}):
                try:
                    view.apply(route, await s.live_backends(app))
                except (AppDeckError, OSError, ValueError) as exc:
                    log.error("could not route app %s again: %s", app.id, exc)
                    continue
                changed += 1
        for route in view.routes():
            if route not in known:
                view.apply(route, None)
                changed += 1
        return changed
