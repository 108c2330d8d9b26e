"""Deploying: create a deployment (through the policy's refusals, in order) and run it to live,
failed, rolled_back or cancelled.

One deployment at a time per app: a second deploy while one is in progress is refused with
``conflict`` (naming the one in progress), rather than queued, so an agent always knows what
will run. Every step is written to the store before it is announced.

Whatever replica runs it, a deploy (like a rollback or restart, :mod:`.operations`) holds the
app's lease (:mod:`.locks`) from its creation to its end, and every deployment write it makes
carries the lease's fence: a replica paused or cut off past its lease finds its writes refused
and stops quietly; the lease's next holder fails the deployment it left
(:meth:`~.core.EngineCore.reclaim_orphan`). The partial unique index
``uq_deployments_in_progress`` backs this up: two deployments in progress for one app cannot
both be written.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from appdeck.common.errors import AppDeckError, Conflict
from appdeck.common.unwinding import to_the_end
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.aborts import abort_held, plan_abort
from appdeck.platform.deploy.builds import build
from appdeck.platform.deploy.core import EngineCore, Progress, quiet
from appdeck.platform.deploy.locks import Hold
from appdeck.platform.deploy.policy import STRATEGIES, DeployBusy, DeployContext, in_progress
from appdeck.platform.deploy.ports import BuildFailed, Instance
from appdeck.platform.deploy.watch import DeployWatch, outcome_of
from appdeck.storage.app_locks import Fenced
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord

log = logging.getLogger("appdeck.deploy")

MAX_HANDED: Final = 1024
"""Leases taken by :meth:`Deploying.create` waiting for their :meth:`~Deploying.run`."""
BUSY_LOOKS: Final = 10
BUSY_LOOK_S: Final = 0.1
"""A deploy refused because the app's lease is held looks for the deployment in progress this
many times, this far apart (see ``Deploying._busy``)."""


class RunSteps:
    """A run's steps: each written under the app's lease once this replica's route changes
    reached the others, then reported and announced. ``record``: the deployment as written.

    The announcements (the change feed's listeners: resource notifications, domains, ...) run
    aside, one after another in the order of the steps, while the run goes on with its next
    piece of work (a build, a start, a health check); :meth:`heard` waits for those made so
    far. Each is made after its step is written, as before."""

    def __init__(
        self,
        engine: EngineCore,
        app: AppRecord,
        record: DeploymentRecord,
        held: Hold,
        progress: Progress,
    ) -> None:
        self._engine = engine
        self._app = app
        self.record = record
        self._held = held
        self._progress = progress
        self._told: asyncio.Task[None] | None = None
        self._writing: asyncio.Task[None] | None = None

    def aside(self, message: str, traffic: int | None = None, state: str | None = None) -> None:
        """Take the step while the run goes on (with work that does not depend on its
        record: the build); the next step waits for it, and raises what it raised."""
        writing = asyncio.create_task(self._take(message, traffic, state))
        writing.add_done_callback(_retrieved)
        self._writing = writing

    async def __call__(
        self, message: str, traffic: int | None = None, state: str | None = None
    ) -> None:
        writing = self._writing
        if writing is not None:  # waited for, never cancelled by this call's cancellation
            await asyncio.wait({writing})
            self._writing = None
            writing.result()
        await self._take(message, traffic, state)

    async def _take(self, message: str, traffic: int | None, state: str | None) -> None:
        engine = self._engine
        self._held.check()
        await engine.router.published()  # the other replicas route as this one before it goes on
        self.record = await engine.store.update(
            self._app.id,
            self.record.number,
            state=state,
            message=message,
            traffic=traffic,
            lease=self._held.lease,
        )
        self._tell(self.record)
        await self._progress(message, traffic)

    def _tell(self, record: DeploymentRecord) -> None:
        """Announce ``record`` aside, after every announcement this run made before."""
        before = self._told

        async def tell() -> None:
            if before is not None:
                await asyncio.wait({before})  # its failure was logged by the engine
            await self._engine.announce(self._app, record)

        told = asyncio.create_task(tell())
        self._engine.background(told)  # logged if it fails; awaited by ``settle``
        self._told = told

    async def heard(self) -> None:
        """Wait until every step written so far was announced."""
        if self._told is not None:
            await asyncio.wait({self._told})


class Deploying(EngineCore):
    async def create(
        self, app: AppRecord, by: str, strategy: str | None, commit: str | None = None
    ) -> tuple[AppRecord, DeploymentRecord]:
        """Check (the policy's rules, in order), freeze the spec, env and source, and record a
        queued deployment by user ``by``. The source is the connected repository at
        ``commit`` (default: its branch's head) if the app has one, else its ``source_path``.
        The caller checked the role (:class:`~.deployments.Deployments`)."""
        chosen = strategy or str(app.spec.get("default_strategy", "rolling"))
        ctx = DeployContext(app, by, chosen, commit)
        await self.policy.before(None, states.QUEUED, ctx, self)
        assert ctx.source is not None, "the policy resolves the source"
        _, sealed = await self.env_of(app.id, app.spec.get("env"))
        return app, await self._queue(app, by, chosen, app.spec, sealed, ctx.source)

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
                said = restarted(restart_of, record)
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
            running = await self.in_progress(app_id)
            if running:
                return in_progress(running)
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

    async def run(
        self, app: AppRecord, record: DeploymentRecord, progress: Progress = quiet
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
        previous = await self.store.get(app.id, record.previous) if record.previous else None
        live = previous if previous is not None and previous.state == states.LIVE else None
        old = self.release_of(app, live) if live else None
        old_instances = await self.instances_of(old) if old else []
        step = RunSteps(self, app, record, held, progress)
        plan = rollout.Rollout(
            self.runtime, self.router, new, old, old_instances, step, self.sleep, watch=watch
        )
        if not await self._rolled_out(step, plan, held, watch):
            await step.heard()
            return step.record
        left = step.record.state
        await step(f"Live: {app.name} serves release {record.number}", 100, state=states.LIVE)
        await step.heard()  # the old release's supersede is announced after the new one's steps
        ctx = DeployContext(app, record.created_by, record.strategy, None, live=live, held=held)
        await self.policy.after(left, states.LIVE, ctx, self)
        return step.record

    async def _rolled_out(
        self, step: RunSteps, plan: rollout.Rollout, held: Hold, watch: DeployWatch
    ) -> bool:
        """Build and start the new release and move the traffic by its strategy: True when
        it has it all; else the run ended (failed, rolled back or cancelled) and the old
        release serves as before."""
        record, old_instances = step.record, plan.old_instances

        async def ended(message: str, state: str) -> bool:
            with watch.phase("shift", traffic=0):  # traffic back to the old release
                await abort_held(held, self.runtime, self.router, plan.new, plan.old, old_instances)
            await step(message, 0, state=state)
            return False

        async def enter_canary() -> None:
            await step("Canary: analysing the new release on a share of traffic", 0, states.CANARY)

        try:
            step.aside(
                "Building: copying the source and running the build command", state=states.BUILDING
            )
            with watch.phase("build"):
                await build(self.runtime, plan.new)
            await step(f"Starting the new release ({record.strategy})", 0, state=states.STARTING)
            await STRATEGIES[record.strategy].roll(plan, enter_canary)
        except Fenced:
            raise  # quietly: whoever holds the app now cleans up
        except (BuildFailed, rollout.RolloutFailed) as exc:
            return await ended(f"Failed: {exc}", states.FAILED)
        except rollout.CanaryRejected as exc:
            watch.rejected(exc.reason)
            return await ended(f"Rolled back automatically: {exc}", states.ROLLED_BACK)
        except asyncio.CancelledError:
            if not held.lost:  # a second cancel (task and relay both ask) must not cut this short
                await to_the_end(self._unwind_cancelled(step, plan, old_instances))
            raise
        except AppDeckError as exc:  # refused by a rule (a checkout, a path): said as it is
            log.warning("deployment %s failed: %s", record.release_id, exc.message)
            return await ended(f"Failed: {exc.message}", states.FAILED)
        except Exception:  # a bug: the log has the traceback; the caller never a class name
            log.exception("deployment %s failed", record.release_id)
            return await ended(
                "Failed: internal error (the server's log has the details)", states.FAILED
            )
        return True

    async def _unwind_cancelled(
        self, step: RunSteps, plan: rollout.Rollout, old_instances: list[Instance]
    ) -> None:
        await plan_abort(self.runtime, self.router, plan.new, plan.old, old_instances)
        try:
            await step("Cancelled; the live release kept serving", 0, states.CANCELLED)
        except Fenced as exc:  # taken over meanwhile (a pause past the lease): theirs stands
            log.warning(
                "deployment %s: its cancel was not written: %s", step.record.release_id, exc
            )


def _retrieved(task: asyncio.Task[None]) -> None:
    """A step taken aside whose failure no later step raised (the run ended otherwise)."""
    if not task.cancelled():
        task.exception()


def restarted(live: DeploymentRecord, record: DeploymentRecord) -> str:
    """The step message of a restart as a new release (no ``in_place_restart``)."""
    return (
        f"Restart of release {live.number} as release {record.number} ({record.strategy}), "
        "with the app's current env: this runtime cannot restart an instance in place"
    )
