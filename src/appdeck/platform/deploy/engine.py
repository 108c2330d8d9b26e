"""DeployService: deploy, roll back, restart and list deployments; reconcile after a restart.

One deployment at a time per app: a second deploy while one is in progress is refused with
``conflict`` (naming the one in progress), rather than queued, so an agent always knows what
will run. Every step is written to the store before it is announced.

Traffic moves on the app's route key (``Release.route``, from :mod:`appdeck.platform.hostnames`),
never on its name: another tenant's app of the same name has another key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from appdeck.common.errors import Conflict, FailedPrecondition, InvalidArgument, NotFound
from appdeck.common.identity import Principal
from appdeck.platform import hostnames
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.ports import (
    Backend,
    BuildFailed,
    Release,
    RouterPort,
    RuntimePort,
)
from appdeck.platform.env import EnvService
from appdeck.platform.release import AppSpec
from appdeck.platform.sources import SourceRoots
from appdeck.platform.specs import STRATEGIES
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord, DeploymentStore

log = logging.getLogger("appdeck.deploy")

Progress = Callable[[str, int | None], Awaitable[None]]


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
        runtime: RuntimePort,
        router: RouterPort,
        feed: ChangeFeed,
        sealer: Sealer,
        *,
        sources: SourceRoots,
        instance_id: str,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.apps = apps
        self._sources = sources
        self._env = env
        self.store = store
        self.runtime = runtime
        self.router = router
        self._feed = feed
        self._sealer = sealer
        self._instance = instance_id
        self.sleep = sleep
        self._locks: dict[int, asyncio.Lock] = {}
        self._aside: set[asyncio.Task[None]] = set()
        self.git: GitSource | None = None
        """Set by the composition root: a connected repository is the app's source."""
        self.gate: Callable[[int, str | None], Awaitable[None]] | None = None
        """Set by the composition root: CI's require_green check of the commit deployed."""

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

    async def list_for(
        self,
        principal: Principal,
        app_id: int,
        *,
        states_: list[str] | None,
        offset: int,
        limit: int,
    ) -> list[DeploymentRecord]:
        await self.apps.load(principal, app_id, "deploy.read")
        return await self.store.for_app(app_id, states=states_, offset=offset, limit=limit)

    async def get(self, principal: Principal, app_id: int, number: int) -> DeploymentRecord:
        await self.apps.load(principal, app_id, "deploy.read")
        record = await self.store.get(app_id, number)
        if record is None:
            raise NotFound(f"app {app_id} has no deployment {number}")
        return record

    async def live(self, app_id: int) -> DeploymentRecord | None:
        found = await self.store.for_app(app_id, states=[states.LIVE], limit=1)
        return found[0] if found else None

    # -- deploying ------------------------------------------------------------------------

    async def create(
        self, principal: Principal, app_id: int, strategy: str | None, commit: str | None = None
    ) -> tuple[AppRecord, DeploymentRecord]:
        """Check, freeze the spec, env and source, and record a queued deployment. The source
        is the connected repository at ``commit`` (default: its branch's head) if the app has
        one, else its ``source_path``."""
        view = await self.apps.load(principal, app_id, "deploy.write")
        app = view.app
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
        if running:
            raise Conflict(
                f"deployment {running[0].number} of this app is still {running[0].state}",
                hint="wait for it (list_deployments) before deploying again",
            )
        unroutable = hostnames.unroutable_reason(app.name, app.tenant_id)
        if unroutable is not None:  # only apps made before the hostname rule can get here
            raise FailedPrecondition(unroutable, hint="rename the app (manage_app update)")
        source = await self._resolve(app, commit) if git else {"path": str(self._source(app))}
        if self.gate is not None:
            found = source.get("commit")
            await self.gate(app_id, found if isinstance(found, str) else None)
        env = await self._env.resolved(app_id, dict(app.spec.get("env") or {}))
        live = await self.live(app_id)
        record = await self.store.create(
            app_id=app_id,
            strategy=chosen,
            spec=app.spec,
            env=self._sealer.seal(json.dumps(env)),
            source=source,
            created_by=principal.user,
            previous=live.number if live else None,
            instance_id=self._instance,
            state=states.QUEUED,
        )
        await self.announce(app, record)
        return app, record

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
        """Drive a created deployment to live, failed or rolled_back."""
        lock = self.lock(app.id)
        async with lock:
            return await self._run(app, record, progress)

    async def _run(
        self, app: AppRecord, record: DeploymentRecord, progress: Progress
    ) -> DeploymentRecord:
        new = self.release_of(app, record)
        old_record = await self.store.get(app.id, record.previous) if record.previous else None
        old = (
            self.release_of(app, old_record)
            if old_record and old_record.state == states.LIVE
            else None
        )
        old_instances = await self.runtime.running(old.release_id) if old else []

        async def step(message: str, traffic: int | None = None, state: str | None = None) -> None:
            nonlocal record
            record = await self.store.update(
                app.id, record.number, state=state, message=message, traffic=traffic
            )
            await self.announce(app, record)
            await progress(message, traffic)

        try:
            await step(
                "Building: copying the source and running the build command", state=states.BUILDING
            )
            await self.runtime.prepare(new)
            await step(f"Starting the new release ({record.strategy})", 0, state=states.STARTING)
            plan = rollout.Rollout(
                self.runtime, self.router, new, old, old_instances, step, self.sleep
            )
            await self._strategy(record, plan, step)
        except (BuildFailed, rollout.RolloutFailed) as exc:
            await plan_abort(self.runtime, self.router, new, old, old_instances)
            await step(f"Failed: {exc}", 0, state=states.FAILED)
            return record
        except rollout.CanaryRejected as exc:
            await plan_abort(self.runtime, self.router, new, old, old_instances)
            await step(f"Rolled back automatically: {exc}", 0, state=states.ROLLED_BACK)
            return record
        except asyncio.CancelledError:
            await plan_abort(self.runtime, self.router, new, old, old_instances)
            await step("Cancelled; the live release kept serving", 0, state=states.CANCELLED)
            raise
        except Exception as exc:
            log.exception("deployment %s failed", record.release_id)
            await plan_abort(self.runtime, self.router, new, old, old_instances)
            await step(f"Failed: internal error ({type(exc).__name__})", 0, state=states.FAILED)
            return record
        await step(f"Live: {app.name} serves release {record.number}", 100, state=states.LIVE)
        if old_record is not None and old_record.state == states.LIVE:
            keep_warm = record.strategy == "blue_green"
            message = "Superseded" + (" (kept warm for an instant rollback)" if keep_warm else "")
            old_after = await self.store.update(
                app.id, old_record.number, state=states.SUPERSEDED, message=message, traffic=0
            )
            await self.announce(app, old_after)
            if not keep_warm:
                await self.runtime.stop(old_record.release_id)
        await self.apps.store.update(app.id, needs_restart=False)
        return record

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

    def lock(self, app_id: int) -> asyncio.Lock:
        """The app's deploy lock: one deploy, rollback or restart of an app at a time."""
        return self._locks.setdefault(app_id, asyncio.Lock())

    def plan(self, release: Release, progress: Progress = _quiet) -> rollout.Rollout:
        """A rollout of ``release`` from nothing (starting it cold, or replacing instances)."""
        return rollout.Rollout(self.runtime, self.router, release, None, [], progress, self.sleep)

    def release_of(self, app: AppRecord, record: DeploymentRecord) -> Release:
        """The release a deployment record describes (its frozen spec and env)."""
        env = json.loads(self._sealer.open(record.env))
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


async def plan_abort(
    runtime: RuntimePort,
    router: RouterPort,
    new: Release,
    old: Release | None,
    old_instances: list[Any],
) -> None:
    if old is not None and old_instances:
        router.route(
            new.route, [Backend(old.release_id, 100, tuple(i.upstream for i in old_instances))]
        )
    else:
        router.unroute(new.route)
    await runtime.stop(new.release_id)


from appdeck.platform.deploy.operations import Operations as Operations  # noqa: E402
