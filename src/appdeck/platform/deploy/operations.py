"""Rollback and restart: the operations on an app's releases besides a deploy.

A rollback or restart holds the app's lease (:mod:`.locks`) like a deploy, waiting for it a
bounded time, and its deployment writes carry the fence: refused once another holder took the
app over (then ``conflict``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable

from appdeck.common.errors import FailedPrecondition, NotFound
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.builds import build
from appdeck.platform.deploy.core import Progress, fenced, quiet
from appdeck.platform.deploy.deploying import Deploying, restarted
from appdeck.platform.deploy.locks import Hold
from appdeck.platform.deploy.policy import refuse_if_stopped
from appdeck.platform.deploy.ports import BuildFailed, Instance, Release
from appdeck.platform.deploy.watch import NO_STRATEGY, RESTART_STRATEGY, DeployWatch
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord, Move


class Operating(Deploying):
    """Rollback and restart (a restart as a new release goes through :meth:`run`)."""

    async def rollback(
        self,
        app: AppRecord,
        number: int | None = None,
        progress: Progress = quiet,
    ) -> DeploymentRecord:
        app_id = app.id
        refuse_if_stopped(app, "a rollback")
        aside: list[Awaitable[None]] = []
        try:
            async with self.locks.hold(app_id, timed=self.watcher.lease()) as held:
                live, target = await self._rollback_target(app_id, number)
                # ceilings and quotas hold again (the quotas read only if it asks for more)
                await self.apps.check_release(app, target.spec, replacing=live.spec)
                with self.watcher.watch("rollback", app_id, target.number, NO_STRATEGY) as watch:
                    return await self._bring_back(app, live, target, held, progress, watch, aside)
        finally:  # the lease let go first: a deploy right after the answer finds it free
            for work in aside:
                self.background(work)

    async def _rollback_target(
        self, app_id: int, number: int | None
    ) -> tuple[DeploymentRecord, DeploymentRecord]:
        """The live deployment and the one a rollback brings back (``number``, default: the
        one before the live one), checked."""
        live, target = await self.store.live_and(app_id, number)  # one read
        if live is None:
            raise FailedPrecondition("the app has no live release to roll back from")
        target_number = number if number is not None else live.previous
        if target_number is None:
            raise FailedPrecondition("there is no earlier release to roll back to")
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
        aside: list[Awaitable[None]],
    ) -> DeploymentRecord:
        """Route the app to ``target``'s release (started again first if it is cold) and
        record it live again, ``live`` rolled back (both in one transaction). What is left
        once that is done (stopping ``live``'s release, announcing both records) goes to
        ``aside``, to run in the background once the lease is let go."""
        app_id = app.id
        release = self.release_of(app, target)
        instances = await self.instances_of(release)
        warm = len(instances) >= release.spec.instances
        if not warm:
            release = await self.startable(app, target)
            await progress(f"Release {target.number} is cold: starting it", 0)
            await self.runtime.stop(release.release_id)
            with watch.phase("build"):
                await build(self.runtime, release)
            plan = self.plan(release, progress, watch)
            for index in range(release.spec.instances):
                await plan.start_one(index)
            instances = plan.started
        with watch.phase("shift", traffic=100):
            self.route(release, instances)
        # issue 21: in effect (HAProxy too) before it is reported; the records are written
        # meanwhile (a crash between leaves the database's word, which a restart routes by)
        moved = asyncio.ensure_future(self.router.published())
        how = "instantly (it was still warm)" if warm else "after starting it again"
        try:
            with fenced(app_id):
                held.check()
                await held.quiet()  # the last write: it lets the lease go too (one commit)
                restored, left = await self.store.move_together(
                    app_id,
                    [
                        Move(target.number, states.LIVE, f"Live again {how}", 100),
                        Move(live.number, states.ROLLED_BACK, f"Rolled back to {target.number}", 0),
                    ],
                    lease=held.lease,
                    known=(target, live),  # read under the lease: written as read, if still
                    let_go=True,
                )
                held.let_go()
        finally:
            await moved
        aside.append(self.runtime.stop(live.release_id))  # traffic already moved: stop it aside
        aside.append(self._announce(app, left, restored))  # recorded: listeners hear it aside
        await progress(f"Rolled back to release {target.number} {how}", 100)
        return restored

    async def _announce(self, app: AppRecord, *records: DeploymentRecord) -> None:
        """Tell subscribers of each record in turn (a rollback's, once it is in effect)."""
        for record in records:
            await self.announce(app, record)

    async def restart(
        self, app: AppRecord, progress: Progress = quiet, *, by: str = ""
    ) -> DeploymentRecord:
        """Rolling restart of the live release: a spare instance first, so even a single
        instance app keeps answering. A restart that fails leaves no spare behind (unless it
        is the only instance still healthy) and says so; the next one starts from whatever
        runs (extra instances above the release's count are stopped at its end). A driver
        without ``in_place_restart`` restarts the live release as a new one instead
        (:meth:`restart_as_release`), recorded as ``by``'s."""
        app_id = app.id
        if not self.runtime.capabilities().in_place_restart:
            return await self.restart_as_release(app, by, progress)
        refuse_if_stopped(app, "a restart")
        async with self.locks.hold(app_id, timed=self.watcher.lease()) as held:
            live = await self._live_to_restart(app_id)
            # the env vars as they are now (what a restart after env_vars is for); the spec
            # stays the release's
            env, sealed = await self.fresh_env(app_id, live)
            frozen = self.release_of(app, live)
            release = dataclasses.replace(frozen, env=env)
            with self.watcher.watch("restart", app_id, live.number, RESTART_STRATEGY) as watch:
                plan = self.plan(release, progress, watch)
                serving = {i.index: i for i in await self.instances_of(release)}
                try:
                    await self._roll(release, serving, plan, held, progress)
                except (BuildFailed, rollout.RolloutFailed) as exc:
                    raise await self._failed_restart(release, serving, plan, exc) from None
            with fenced(app_id):
                held.check()
                record = await self.store.update(
                    app_id,
                    live.number,
                    message="Restarted (rolling) with the app's current env",
                    env=sealed,
                    lease=held.lease,
                )
            await self.apps.store.update(app_id, needs_restart=False)
            await self.announce(app, record)
            return record

    async def restart_as_release(
        self, app: AppRecord, by: str, progress: Progress = quiet
    ) -> DeploymentRecord:
        """A restart where the driver cannot restart one instance in place (its capabilities
        say ``in_place_restart`` False: a Deployment's pods are the cluster's): the live
        release again as a new deployment (a new number and release id) with the app's env as
        it is now, by the app's strategy, through :meth:`run` like any deploy. Its spec and
        source are the live release's frozen ones. ``by``: who asked (the new record's
        ``created_by``)."""
        app_id = app.id
        refuse_if_stopped(app, "a restart")
        live = await self._live_to_restart(app_id)
        _, sealed = await self.fresh_env(app_id, live)  # the run thaws it from the record
        strategy = str(app.spec.get("default_strategy", "rolling"))
        record = await self._queue(app, by, strategy, live.spec, sealed, live.source, live)
        await progress(restarted(live, record), None)
        return await self.run(app, record, progress)

    async def _live_to_restart(self, app_id: int) -> DeploymentRecord:
        live = await self.live(app_id)
        if live is None:
            raise FailedPrecondition(
                "the app has no live release to restart", hint="deploy_app first"
            )
        return live

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
        count = release.spec.instances
        spare = max([count - 1, *serving]) + 1
        serving[spare] = await plan.start_one(spare)
        for index in range(count):
            held.check()  # lost the app: stop restarting its instances
            serving.pop(index, None)  # out of the route, then stopped
            self._route_serving(release, serving, plan.watch)
            await self.runtime.stop(release.release_id, index)
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
        count = release.spec.instances
        failed = [i for i in plan.started if serving.get(i.index) is not i]
        for instance in failed:
            await self.runtime.stop(release.release_id, instance.index)
        kept_spare = not any(k < count for k in serving)
        if not kept_spare:
            await self._retire_extra(release, serving, plan.watch)
        elif serving:
            self._route_serving(release, serving, plan.watch)
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
        self._route_serving(release, serving, watch)
        for index in extra:
            await self.runtime.stop(release.release_id, index)

    def _route_serving(
        self, release: Release, serving: dict[int, Instance], watch: DeployWatch
    ) -> None:
        if serving:
            with watch.phase("shift", traffic=100):
                self.route(release, [i for _, i in sorted(serving.items())])
