"""What a server does on its own: at start-up, reconcile (deployments nobody drives end
failed, live releases are adopted or started again and routed); every few seconds, reclaim
(the same first half), apply the stops and starts the operator's CLI recorded, and resync this
replica's route table with the database.

Reconciling ends only deployments whose lease is free: one a live replica drives is left
alone.
"""

from __future__ import annotations

import logging
from typing import Protocol

from appdeck.common.errors import AppDeckError
from appdeck.model import hostnames
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.builds import build
from appdeck.platform.deploy.core import STOPPED_ROUTE, quiet, route_of
from appdeck.platform.deploy.ports import Backend, BuildFailed, Instance, Release
from appdeck.platform.deploy.running import Running
from appdeck.storage.app_locks import Fenced
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord

log = logging.getLogger("appdeck.deploy")


class RouteView(Protocol):
    """This replica's route table (an :class:`~.ingress_router.IngressRouter`)."""

    def serving(self, route: str) -> frozenset[str] | None: ...
    def routes(self) -> list[str]: ...
    def apply(self, route: str, backends: list[Backend] | None) -> None: ...


class Reconciling(Running):
    async def reclaim(self) -> int:
        """End the deployments in progress that nobody drives (their app's lease is free:
        the replica driving them died or stalled past it). Idempotent; any replica may run
        it, at start-up and every few seconds. Returns how many it ended."""
        ended = 0
        for record in await self.store.in_states(states.IN_PROGRESS):
            app = await self.apps.store.get(record.app_id)
            if app is None:
                continue
            try:
                if await self.reclaim_orphan(app, record):
                    ended += 1
            except Exception:  # one app's trouble must not stop the others'
                log.exception("could not reclaim deployment %s", record.release_id)
        return ended

    async def reconcile(self, *, sole: bool = False) -> tuple[int, int]:
        """After a restart: deployments left in progress with nobody driving them end failed
        (the live release kept serving); live releases are re-adopted (or started again) and
        routed. ``sole``: this process is the only one on the database (the embedded
        default, no replicas), so leases of earlier processes are void at once rather than
        when they expire. Returns (deployments ended, live releases routed)."""
        if sole:
            await self.locks.store.expire_others(self.locks.instance_id)
        interrupted = await self.reclaim()
        restored = 0
        for record in await self.store.in_states([states.LIVE]):
            app = await self.apps.store.get(record.app_id)
            if app is not None and await self._restore(app, record):
                restored += 1
        await self.apply_intents()  # stops and starts the CLI asked for meanwhile
        return interrupted, restored

    async def _restore(self, app: AppRecord, record: DeploymentRecord) -> bool:
        """Adopt the live release's instances, start the missing ones, and route them:
        True when some run. A stopped app stays stopped."""
        unroutable = hostnames.unroutable_reason(app.name, app.tenant_id)
        if unroutable is not None:  # never route a label another app could also have
            log.error("not routing app %s after a restart: %s", app.id, unroutable)
            return False
        release = self.release_of(app, record)
        if app.stopped:  # stays stopped across restarts
            await self.keep_stopped(app, release)
            return False
        instances = {i.index: i for i in await self.runtime.running(release.release_id)}
        recovered = await self.runtime.recover(release)
        instances.update((i.index, i) for i in recovered.adopted)
        missing = [k for k in range(release.spec.instances) if k not in instances]
        started = bool(missing) and await self._start_missing(app, record, instances, missing)
        if not instances:
            return False
        upstreams = tuple(i.upstream for _, i in sorted(instances.items()))
        backends = [Backend(release.release_id, 100, upstreams)]
        if started:  # new instances: every replica routes them
            self.router.route(release.route, backends)
        else:  # the others route it already (or a deploy of it is under way)
            self.router.apply(release.route, backends)
        return True

    async def _start_missing(
        self,
        app: AppRecord,
        record: DeploymentRecord,
        instances: dict[int, Instance],
        missing: list[int],
    ) -> bool:
        """Start the ``missing`` instances of the live release into ``instances``, under the
        app's lease (held: an operation on the app is under way, and it decides). True when
        one started."""
        held = await self.locks.try_take(app.id)
        if held is None:
            return False
        held.start()
        started = False
        release_id = record.release_id
        try:
            release = await self.startable(app, record)  # a checkout wiped: made again
            await build(self.runtime, release)
            plan = self.plan(release, quiet)
            for index in missing:
                held.check()
                instances[index] = await plan.start_one(index)
                started = True
        except (BuildFailed, rollout.RolloutFailed, AppDeckError, Fenced) as exc:
            log.error("could not restart %s after a server restart: %s", release_id, exc)
        finally:
            await held.release()
        return started

    async def apply_intents(self) -> int:
        """Apply the stops and starts the operator's CLI recorded (``apps.run_intent``):
        each under the app's lease; an app whose lease is held waits for the next call.
        Returns how many were applied."""
        applied = 0
        for app in await self.apps.store.with_intent():
            held = await self.locks.try_take(app.id)
            if held is None:
                continue
            held.start()
            try:
                if app.run_intent == "stop":
                    await self._stop(app, held)
                else:
                    await self._start(app, held, quiet)
                applied += 1
            except (AppDeckError, BuildFailed, rollout.RolloutFailed, Fenced) as exc:
                log.error("could not %s app %s as asked: %s", app.run_intent, app.id, exc)
                await self.apps.store.update(app.id, run_intent=None)
            finally:
                await held.release()
        return applied

    async def keep_stopped(self, app: AppRecord, release: Release) -> None:
        """After a restart: a stopped app's instances (started before it was stopped by a
        CLI, say) are stopped, and its route, in this replica's table (the others route it
        themselves), is the marker."""
        if await self.instances_of(release):
            await self.runtime.stop(release.release_id)
        self.router.apply(route_of(app), list(STOPPED_ROUTE))

    async def resync_routes(self, view: RouteView) -> int:
        """The backstop of the ``routes`` messages (which a replica misses while its broadcast
        connection is down): every app with no deployment in progress is routed in this
        replica's table (``view``) as the database says (its live release, or nothing), and
        routes of apps that are gone are forgotten. Only this replica's table changes. Run
        after a broadcast reconnect and every few seconds. Returns how many routes changed."""
        busy = {r.app_id for r in await self.store.in_states(states.IN_PROGRESS)}
        live = {r.app_id: r for r in await self.store.in_states([states.LIVE])}
        changed = 0
        known: set[str] = set()
        for app in await self.apps.store.all_apps():
            if hostnames.unroutable_reason(app.name, app.tenant_id) is not None:
                continue
            route = route_of(app)
            known.add(route)
            if app.id not in busy:  # else its deploy's messages lead; its end is checked next time
                changed += await self._resync(view, app, route, live.get(app.id))
        for route in view.routes():
            if route not in known:
                view.apply(route, None)
                changed += 1
        return changed

    async def _resync(
        self, view: RouteView, app: AppRecord, route: str, want: DeploymentRecord | None
    ) -> int:
        """Route one app in ``view`` as the database says: 1 when its route changed."""
        have = view.serving(route)
        if app.stopped:
            view.apply(route, list(STOPPED_ROUTE))
            return int(have != frozenset())
        if want is None:
            if have is None or have:
                view.apply(route, [])
                return 1
            return 0
        if have == frozenset({want.release_id}):
            return 0
        try:
            view.apply(route, await self.live_backends(app))
        except (AppDeckError, OSError, ValueError) as exc:
            log.error("could not route app %s again: %s", app.id, exc)
            return 0
        return 1
