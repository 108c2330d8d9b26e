"""Operating an app without a new release: stop, start, scale, and cancel a deploy in progress
(``docs/operating.md``).

- **stop**: the app is marked stopped in the database first (so a restarted server, or another
  replica, keeps it stopped), its route goes to the ingress's :data:`~.ingress.STOPPED` marker
  (every replica's ingress answers 503 "stopped"), then its instances are stopped, the live
  release's and any kept warm. Its data (tables, app database, env vars, deployments) stays.
- **start**: the live release's instances are started again (behind their health checks) and
  routed; on failure what was started is stopped and the app stays stopped.
- **scale**: the live release runs ``n`` instances from now on, without a new release: the
  missing ones are started behind their health checks, or the extra ones taken out of the
  route and then stopped. The count is written into the live release's frozen spec (so a
  restart, a server restart and a rollback to it keep it) and the app's spec (the next deploy
  keeps it). A stopped app is scaled for its next start.
- **cancel**: the deploy in progress is cancelled the way ``tasks/cancel`` cancels its task
  (the run unwinds: its new release stops, the live one keeps serving, it ends
  ``cancelled``). On another replica the cancel is carried to the one driving it
  (:mod:`.cancels`) and the answer waits for the deployment to end.

Each holds the app's lease (:mod:`.locks`) like a deploy, so none of them races a deploy,
rollback or restart. The operator's CLI (``appdeck app stop|start``) does not touch a running
server's processes: it records an intent (``apps.run_intent``) that a server applies on its
next deploy watch (:meth:`~.reconcile.Reconciling.apply_intents`, every few seconds) or at its
next start.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final

from appdeck.common.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from appdeck.common.identity import Principal
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.builds import build
from appdeck.platform.deploy.core import (
    STOPPED_ROUTE,
    EngineCore,
    Progress,
    fenced,
    quiet,
    route_of,
)
from appdeck.platform.deploy.locks import Hold
from appdeck.platform.deploy.ports import BuildFailed
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord

log = logging.getLogger("appdeck.deploy")

MAX_INSTANCES: Final = 10
"""The spec schema's bound on ``instances`` (``model/specs.py``)."""
CANCEL_WAIT_S: Final = 60.0
"""How long a cancel waits for the deploy's run to unwind (stopping its new release)."""
CANCEL_POLL_S: Final = 0.25
"""How often a cancel sent to another replica re-reads the deployment."""


@dataclass(frozen=True, slots=True)
class RunState:
    """Where an app stands after a stop, start or scale."""

    app: AppRecord
    live: DeploymentRecord | None
    stopped: bool
    running: int
    """Instances of the live release running now (0 when stopped)."""


class Running(EngineCore):
    """Stop, start, scale and cancel."""

    # -- the callers' operations -------------------------------------------------------------

    async def stop(self, app: AppRecord) -> RunState:
        app_id = app.id
        async with self.locks.hold(app_id) as held:
            await self._refuse_in_progress(app_id)
            if await self.live(app_id) is None:
                raise FailedPrecondition(
                    "the app has no live release: nothing runs to stop",
                    hint="deploy_app first (manage_app delete removes an app and its data)",
                )
            app = await self._stop(app, held)
            return RunState(app, await self.live(app_id), True, 0)

    async def start(self, app: AppRecord, progress: Progress = quiet) -> RunState:
        app_id = app.id
        async with self.locks.hold(app_id) as held:
            await self._refuse_in_progress(app_id)
            app, running = await self._start(app, held, progress)
            return RunState(app, await self.live(app_id), False, running)

    async def scale(
        self,
        app: AppRecord,
        instances: int,
        progress: Progress = quiet,
        *,
        by: Principal,
    ) -> RunState:
        """``by``: whose spec write records the new count (``apps.set_spec``, its own
        ``spec.write`` check); the caller checked ``deploy.write``."""
        app_id = app.id
        if not 1 <= instances <= MAX_INSTANCES:
            raise InvalidArgument(f"instances must be between 1 and {MAX_INSTANCES}")
        async with self.locks.hold(app_id) as held:
            await self._refuse_in_progress(app_id)
            live = await self.live(app_id)
            if live is None:
                raise FailedPrecondition(
                    "the app has no live release to scale",
                    hint="set_app_spec with spec.instances, then deploy_app",
                )
            app = await self.apps.store.get(app_id) or app
            running = 0
            if not app.stopped:
                running = await self._rescale(app, live, instances, held, progress)
            with fenced(app_id):
                held.check()
                live = await self.store.update(
                    app_id,
                    live.number,
                    message=f"Scaled to {instances} instance(s)",
                    spec={**live.spec, "instances": instances},
                    lease=held.lease,
                )
            view, _ = await self.apps.set_spec(by, app_id, {"instances": instances})
            await self.announce(app, live)
            return RunState(view.app, live, app.stopped, running)

    async def cancel(self, app: AppRecord, number: int | None = None) -> DeploymentRecord:
        """Cancel the app's deployment in progress (``number``: it must be that one)."""
        app_id = app.id
        record = await self.in_progress(app_id)
        if record is None or (number is not None and record.number != number):
            if number is not None and await self.store.get(app_id, number) is None:
                raise NotFound(f"app {app_id} has no deployment {number}")
            raise FailedPrecondition(
                "no deployment of this app is in progress"
                if number is None
                else f"deployment {number} is not in progress",
                hint="list_deployments shows where each one stands",
            )
        run = self.runs.get((app_id, record.number))
        if run is not None:
            run.cancel()
            await asyncio.wait({run}, timeout=CANCEL_WAIT_S)
            return await self.store.get(app_id, record.number) or record
        if await self.reclaim_orphan(app, record):  # nobody drove it: it ended failed just now
            return await self.store.get(app_id, record.number) or record
        if not self.cancels.shared:
            raise Unavailable(
                f"deployment {record.number} is driven by another process",
                hint="cancel its task (tasks/cancel), or wait for it: list_deployments",
            )
        await self.cancels.ask(app_id, record.number)  # the replica that drives it cancels it
        return await self._ended(app_id, record)

    async def _ended(self, app_id: int, record: DeploymentRecord) -> DeploymentRecord:
        """The deployment once it left its in-progress states (another replica unwinds it),
        waited for up to :data:`CANCEL_WAIT_S`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CANCEL_WAIT_S
        while True:
            now = await self.store.get(app_id, record.number) or record
            if now.state not in states.IN_PROGRESS:
                return now
            if loop.time() >= deadline:
                raise Unavailable(
                    f"deployment {record.number} did not end within {CANCEL_WAIT_S:.0f} s of "
                    "the cancel sent to the replica driving it",
                    hint="list_deployments shows where it stands; cancel again if it still runs",
                )
            await asyncio.sleep(CANCEL_POLL_S)

    # -- the work ------------------------------------------------------------------------

    async def _stop(self, app: AppRecord, held: Hold) -> AppRecord:
        held.check()
        app = await self.apps.store.update(app.id, stopped=True, run_intent=None)
        self.router.route(route_of(app), list(STOPPED_ROUTE))  # every replica answers "stopped"
        await self.router.published()  # issue 21: and HAProxy does, before an instance stops
        for record in await self.store.for_app(
            app.id, states=[states.LIVE, states.SUPERSEDED, states.ROLLED_BACK], limit=10
        ):
            if await self.instances_of(self.release_of(app, record)):  # adopted: known to stop
                await self.runtime.stop(record.release_id)  # after the route change is published
        live = await self.live(app.id)
        if live is not None:
            with fenced(app.id):
                record = await self.store.update(
                    app.id, live.number, message="Stopped by its operator", lease=held.lease
                )
            await self.announce(app, record)
        log.info("app %s stopped", app.id)
        return app

    async def _start(self, app: AppRecord, held: Hold, progress: Progress) -> tuple[AppRecord, int]:
        live = await self.live(app.id)
        if live is None:
            app = await self.apps.store.update(app.id, stopped=False, run_intent=None)
            await self.route_live(app)
            return app, 0
        release = await self.startable(app, live)
        serving = {i.index: i for i in await self.instances_of(release)}
        missing = [k for k in range(release.spec.instances) if k not in serving]
        plan = self.plan(release, progress)
        try:
            if missing:
                await build(self.runtime, release)
            for index in missing:
                held.check()
                serving[index] = await plan.start_one(index)
                await progress(f"Started instance {index + 1} of {release.spec.instances}", None)
        except (BuildFailed, rollout.RolloutFailed) as exc:
            await self.runtime.stop(release.release_id)
            raise FailedPrecondition(
                f"release {live.number} did not start again: {exc}; the app stays stopped",
                hint="tail_deploy_logs shows why; deploy_app a fixed release after starting",
            ) from None
        self.route(release, [i for _, i in sorted(serving.items())])
        await self.router.published()  # issue 21: in effect (HAProxy too) before it is reported
        app = await self.apps.store.update(app.id, stopped=False, run_intent=None)
        with fenced(app.id):
            record = await self.store.update(
                app.id, live.number, message="Started by its operator", lease=held.lease
            )
        await self.announce(app, record)
        log.info("app %s started (%d instance(s))", app.id, len(serving))
        return app, len(serving)

    async def _rescale(
        self,
        app: AppRecord,
        live: DeploymentRecord,
        count: int,
        held: Hold,
        progress: Progress,
    ) -> int:
        """Run ``count`` instances of the live release; returns how many run."""
        release = self.release_of(app, live)
        serving = {i.index: i for i in await self.instances_of(release)}
        plan = self.plan(release, progress)
        try:
            for index in [k for k in range(count) if k not in serving]:
                held.check()
                serving[index] = await plan.start_one(index)
                await progress(f"Started instance {index + 1} of {count}", None)
        except (BuildFailed, rollout.RolloutFailed) as exc:
            for instance in plan.started:  # the ones this scale started: none is routed
                await self.runtime.stop(release.release_id, instance.index)
            raise FailedPrecondition(
                f"could not scale to {count}: {exc}; the instances that ran still run",
                hint="tail_deploy_logs shows why",
            ) from None
        kept = [i for k, i in sorted(serving.items()) if k < count]
        self.route(release, kept)
        await self.router.published()  # issue 21: HAProxy too, before the extra instances stop
        for index in sorted(k for k in serving if k >= count):  # out of every route first
            await self.runtime.stop(release.release_id, index)
        return len(kept)

    async def _refuse_in_progress(self, app_id: int) -> None:
        found = await self.in_progress(app_id)
        if found:
            raise FailedPrecondition(
                f"deployment {found.number} of this app is still {found.state}",
                hint="cancel it (deploy_app with action cancel) or wait for it",
            )
