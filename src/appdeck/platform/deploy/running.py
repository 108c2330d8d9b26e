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
next deploy watch (:meth:`Running.apply_intents`, every few seconds) or at its next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from appdeck.common.errors import (
    AppDeckError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from appdeck.common.identity import Principal
from appdeck.ingress.routes import STOPPED
from appdeck.model import hostnames
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.builds import build
from appdeck.platform.deploy.locks import Hold
from appdeck.platform.deploy.ports import Backend, BuildFailed, Instance, Release
from appdeck.storage.app_locks import Fenced
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord

if TYPE_CHECKING:
    from appdeck.platform.deploy.engine import DeployService

log = logging.getLogger("appdeck.deploy")

Progress = Callable[[str, int | None], Awaitable[None]]

MAX_INSTANCES: Final = 10
"""The spec schema's bound on ``instances`` (``model/specs.py``)."""
CANCEL_WAIT_S: Final = 60.0
"""How long a cancel waits for the deploy's run to unwind (stopping its new release)."""
CANCEL_POLL_S: Final = 0.25
"""How often a cancel sent to another replica re-reads the deployment."""
INTENTS: Final = ("stop", "start")
"""What the operator's CLI may ask a server to do (``apps.run_intent``)."""
STOPPED_ROUTE: Final = (Backend(STOPPED, 0, ()),)
"""A stopped app's route: the ingress answers 503 "stopped"."""


async def _quiet(message: str, traffic: int | None) -> None:
    return None


@dataclass(frozen=True, slots=True)
class RunState:
    """Where an app stands after a stop, start or scale."""

    app: AppRecord
    live: DeploymentRecord | None
    stopped: bool
    running: int
    """Instances of the live release running now (0 when stopped)."""


class Running:
    """Stop, start, scale and cancel, on the deploy engine's collaborators."""

    def __init__(self, service: DeployService) -> None:
        self._s = service

    # -- the callers' operations -------------------------------------------------------------

    async def stop(self, app: AppRecord) -> RunState:
        s, app_id = self._s, app.id
        async with s.locks.hold(app_id) as held:
            await self._refuse_in_progress(app_id)
            if await s.live(app_id) is None:
                raise FailedPrecondition(
                    "the app has no live release: nothing runs to stop",
                    hint="deploy_app first (manage_app delete removes an app and its data)",
                )
            app = await self._stop(app, held)
            return RunState(app, await s.live(app_id), True, 0)

    async def start(self, app: AppRecord, progress: Progress = _quiet) -> RunState:
        s, app_id = self._s, app.id
        async with s.locks.hold(app_id) as held:
            await self._refuse_in_progress(app_id)
            app, running = await self._start(app, held, progress)
            return RunState(app, await s.live(app_id), False, running)

    async def scale(
        self,
        app: AppRecord,
        instances: int,
        progress: Progress = _quiet,
        *,
        by: Principal,
    ) -> RunState:
        """``by``: whose spec write records the new count (``apps.set_spec``, its own
        ``spec.write`` check); the caller checked ``deploy.write``."""
        s, app_id = self._s, app.id
        if not 1 <= instances <= MAX_INSTANCES:
            raise InvalidArgument(f"instances must be between 1 and {MAX_INSTANCES}")
        async with s.locks.hold(app_id) as held:
            await self._refuse_in_progress(app_id)
            live = await s.live(app_id)
            if live is None:
                raise FailedPrecondition(
                    "the app has no live release to scale",
                    hint="set_app_spec with spec.instances, then deploy_app",
                )
            app = await s.apps.store.get(app_id) or app
            running = 0
            if not app.stopped:
                running = await self._rescale(app, live, instances, held, progress)
            with fenced(app_id):
                held.check()
                live = await s.store.update(
                    app_id,
                    live.number,
                    message=f"Scaled to {instances} instance(s)",
                    spec={**live.spec, "instances": instances},
                    lease=held.lease,
                )
            view, _ = await s.apps.set_spec(by, app_id, {"instances": instances})
            await s.announce(app, live)
            return RunState(view.app, live, app.stopped, running)

    async def cancel(self, app: AppRecord, number: int | None = None) -> DeploymentRecord:
        """Cancel the app's deployment in progress (``number``: it must be that one)."""
        s, app_id = self._s, app.id
        found = await s.store.for_app(app_id, states=sorted(states.IN_PROGRESS), limit=1)
        if not found or (number is not None and found[0].number != number):
            if number is not None and await s.store.get(app_id, number) is None:
                raise NotFound(f"app {app_id} has no deployment {number}")
            raise FailedPrecondition(
                "no deployment of this app is in progress"
                if number is None
                else f"deployment {number} is not in progress",
                hint="list_deployments shows where each one stands",
            )
        record = found[0]
        run = s.runs.get((app_id, record.number))
        if run is not None:
            run.cancel()
            await asyncio.wait({run}, timeout=CANCEL_WAIT_S)
            return await s.store.get(app_id, record.number) or record
        if await s.reclaim(app, record):  # nobody drove it: it ended failed just now
            return await s.store.get(app_id, record.number) or record
        if not s.cancels.shared:
            raise Unavailable(
                f"deployment {record.number} is driven by another process",
                hint="cancel its task (tasks/cancel), or wait for it: list_deployments",
            )
        await s.cancels.ask(app_id, record.number)  # the replica that drives it cancels it
        return await self._ended(app_id, record)

    async def _ended(self, app_id: int, record: DeploymentRecord) -> DeploymentRecord:
        """The deployment once it left its in-progress states (another replica unwinds it),
        waited for up to :data:`CANCEL_WAIT_S`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CANCEL_WAIT_S
        while True:
            now = await self._s.store.get(app_id, record.number) or record
            if now.state not in states.IN_PROGRESS:
                return now
            if loop.time() >= deadline:
                raise Unavailable(
                    f"deployment {record.number} did not end within {CANCEL_WAIT_S:.0f} s of "
                    "the cancel sent to the replica driving it",
                    hint="list_deployments shows where it stands; cancel again if it still runs",
                )
            await asyncio.sleep(CANCEL_POLL_S)

    # -- what a server applies on its own ------------------------------------------------

    async def apply_intents(self) -> int:
        """Apply the stops and starts the operator's CLI recorded (``apps.run_intent``):
        each under the app's lease; an app whose lease is held waits for the next call.
        Returns how many were applied."""
        s = self._s
        applied = 0
        for app in await s.apps.store.with_intent():
            held = await s.locks.try_take(app.id)
            if held is None:
                continue
            held.start()
            try:
                if app.run_intent == "stop":
                    await self._stop(app, held)
                else:
                    await self._start(app, held, _quiet)
                applied += 1
            except (AppDeckError, BuildFailed, rollout.RolloutFailed, Fenced) as exc:
                log.error("could not %s app %s as asked: %s", app.run_intent, app.id, exc)
                await s.apps.store.update(app.id, run_intent=None)
            finally:
                await held.release()
        return applied

    async def keep_stopped(self, app: AppRecord, release: Release) -> None:
        """After a restart: a stopped app's instances (started before it was stopped by a
        CLI, say) are stopped, and its route, in this replica's table, is the marker."""
        s = self._s
        if await s.instances_of(release):
            await s.runtime.stop(release.release_id)
        here(s, app)

    # -- the work ------------------------------------------------------------------------

    async def _stop(self, app: AppRecord, held: Hold) -> AppRecord:
        s = self._s
        held.check()
        app = await s.apps.store.update(app.id, stopped=True, run_intent=None)
        s.router.route(route_of(app), list(STOPPED_ROUTE))  # every replica answers "stopped"
        await s.router.published()  # issue 21: and HAProxy does, before an instance stops
        for record in await s.store.for_app(
            app.id, states=[states.LIVE, states.SUPERSEDED, states.ROLLED_BACK], limit=10
        ):
            if await s.instances_of(s.release_of(app, record)):  # adopted: known to stop
                await s.runtime.stop(record.release_id)  # after the route change is published
        live = await s.live(app.id)
        if live is not None:
            with fenced(app.id):
                record = await s.store.update(
                    app.id, live.number, message="Stopped by its operator", lease=held.lease
                )
            await s.announce(app, record)
        log.info("app %s stopped", app.id)
        return app

    async def _start(self, app: AppRecord, held: Hold, progress: Progress) -> tuple[AppRecord, int]:
        s = self._s
        live = await s.live(app.id)
        if live is None:
            app = await s.apps.store.update(app.id, stopped=False, run_intent=None)
            await s.route_live(app)
            return app, 0
        release = await s.startable(app, live)
        serving = {i.index: i for i in await s.instances_of(release)}
        missing = [k for k in range(release.spec.instances) if k not in serving]
        plan = s.plan(release, progress)
        try:
            if missing:
                await build(s.runtime, release)
            for index in missing:
                held.check()
                serving[index] = await plan.start_one(index)
                await progress(f"Started instance {index + 1} of {release.spec.instances}", None)
        except (BuildFailed, rollout.RolloutFailed) as exc:
            await s.runtime.stop(release.release_id)
            raise FailedPrecondition(
                f"release {live.number} did not start again: {exc}; the app stays stopped",
                hint="tail_deploy_logs shows why; deploy_app a fixed release after starting",
            ) from None
        upstreams = tuple(i.upstream for _, i in sorted(serving.items()))
        s.router.route(release.route, [Backend(release.release_id, 100, upstreams)])
        await s.router.published()  # issue 21: in effect (HAProxy too) before it is reported
        app = await s.apps.store.update(app.id, stopped=False, run_intent=None)
        with fenced(app.id):
            record = await s.store.update(
                app.id, live.number, message="Started by its operator", lease=held.lease
            )
        await s.announce(app, record)
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
        s = self._s
        release = s.release_of(app, live)
        serving = {i.index: i for i in await s.instances_of(release)}
        plan = s.plan(release, progress)
        try:
            for index in [k for k in range(count) if k not in serving]:
                held.check()
                serving[index] = await plan.start_one(index)
                await progress(f"Started instance {index + 1} of {count}", None)
        except (BuildFailed, rollout.RolloutFailed) as exc:
            for instance in plan.started:  # the ones this scale started: none is routed
                await s.runtime.stop(release.release_id, instance.index)
            raise FailedPrecondition(
                f"could not scale to {count}: {exc}; the instances that ran still run",
                hint="tail_deploy_logs shows why",
            ) from None
        kept = [i for k, i in sorted(serving.items()) if k < count]
        s.router.route(release.route, [Backend(release.release_id, 100, _upstreams(kept))])
        await s.router.published()  # issue 21: HAProxy too, before the extra instances stop
        for index in sorted(k for k in serving if k >= count):  # out of every route first
            await s.runtime.stop(release.release_id, index)
        return len(kept)

    async def _refuse_in_progress(self, app_id: int) -> None:
        found = await self._s.store.for_app(app_id, states=sorted(states.IN_PROGRESS), limit=1)
        if found:
            raise FailedPrecondition(
                f"deployment {found[0].number} of this app is still {found[0].state}",
                hint="cancel it (deploy_app with action cancel) or wait for it",
            )


def route_of(app: AppRecord) -> str:
    return hostnames.route_label(app.name, app.tenant_id)


def here(s: DeployService, app: AppRecord) -> None:
    """A stopped app's route in this replica's table (the others route it themselves)."""
    s.router.apply(route_of(app), list(STOPPED_ROUTE))


def refuse_if_stopped(app: AppRecord, what: str) -> None:
    """A deploy, rollback or restart of a stopped app is refused: it would start it."""
    if app.stopped:
        raise FailedPrecondition(
            f"the app is stopped: {what} would start it",
            hint="restart_app with action start first",
        )


def _upstreams(instances: list[Instance]) -> tuple[str, ...]:
    return tuple(i.upstream for i in instances)


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
