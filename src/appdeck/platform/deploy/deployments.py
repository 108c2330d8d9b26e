"""Deployments as callers see them: deploy (waiting a bounded time, or to the end), roll back
(confirming what :mod:`policy` says needs it), restart, stop, start, scale, cancel, list and
read, each shaped as a
:class:`DeploymentView` with the app's URL. Tools, resources, prompts, a CLI or a web page call
this service; the engine (:mod:`engine`) does the work.

Runs that outlive their caller (a deploy not run as a task, answered after ``wait_s``) are
owned here, not by a tool module: :meth:`Deployments.settle` waits for them at shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from appdeck.common.errors import ConfirmationRequired, NotFound
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService, AppView
from appdeck.platform.deploy import policy, states
from appdeck.platform.deploy.engine import DeployEngine
from appdeck.platform.deploy.running import RunState
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentBrief, DeploymentRecord

Progress = Callable[[str, int | None], Awaitable[None]]


async def _quiet(message: str, traffic: int | None) -> None:
    return None


@dataclass(frozen=True, slots=True)
class DeploymentView:
    """One deployment, with where its app is served."""

    app: AppRecord
    record: DeploymentRecord
    url: str

    @property
    def done(self) -> bool:
        return self.record.state not in states.IN_PROGRESS

    @property
    def live(self) -> bool:
        return self.record.state == states.LIVE

    def public(self, *, steps: bool = True) -> dict[str, Any]:
        """What a caller may see (never the env)."""
        data = self.record.public()
        if not steps:
            data.pop("steps", None)
        data["url"] = self.url
        data["done"] = self.done
        return data


class Deployments:
    def __init__(self, apps: AppService, engine: DeployEngine) -> None:
        self._apps = apps
        self._engine = engine
        self._running: set[asyncio.Future[DeploymentRecord]] = set()

    async def deploy(
        self,
        principal: Principal,
        app_id: int,
        strategy: str | None = None,
        *,
        wait_s: float | None,
        progress: Progress = _quiet,
        commit: str | None = None,
    ) -> DeploymentView:
        """Create and run a deployment (of ``commit`` of the connected repository: see
        ``DeployEngine.create``). ``wait_s=None`` waits for the outcome (a task; a
        cancellation cancels the deploy, and the live release keeps serving); otherwise the
        deployment so far is returned after at most ``wait_s`` and the run goes on here."""
        view = await self._apps.load(principal, app_id, "deploy.write")
        app, record = await self._engine.create(view.app, principal.user, strategy, commit)

        async def numbered(message: str, traffic: int | None) -> None:
            await progress(f"#{record.number}: {message}", traffic)

        run = asyncio.ensure_future(self._engine.run(app, record, numbered))
        if wait_s is None:
            return self._view(view, await run)
        self._running.add(run)
        run.add_done_callback(self._running.discard)
        done, _ = await asyncio.wait({run}, timeout=policy.wait_seconds(wait_s))
        if done:
            return self._view(view, run.result())
        return self._view(view, await self._record(app_id, record.number))

    async def rollback(
        self,
        principal: Principal,
        app_id: int,
        number: int | None = None,
        *,
        confirmed: bool = False,
        progress: Progress = _quiet,
    ) -> DeploymentView:
        """Put ``number`` (default: the release before the live one) back live."""
        view = await self._apps.load(principal, app_id, "deploy.write")
        live = await self._engine.live(app_id)
        if policy.rollback_needs_confirmation(live, number) and not confirmed:
            raise ConfirmationRequired(
                "rolling back past the previous release needs a confirmation",
                question=f"Roll back {view.app.name} past the previous release, "
                f"to deployment #{number}?",
                what="the rollback",
            )
        restored = await self._engine.rollback(view.app, number, progress)
        return self._view(view, restored)

    async def restart(
        self, principal: Principal, app_id: int, *, progress: Progress = _quiet
    ) -> DeploymentView:
        """Restart the live release instance by instance (a spare one first)."""
        view = await self._apps.load(principal, app_id, "deploy.write")
        return self._view(view, await self._engine.restart(view.app, progress, by=principal.user))

    async def stop(self, principal: Principal, app_id: int) -> Operated:
        """Stop the app (0 instances, 503 "stopped"), keeping its data (:mod:`.running`)."""
        view = await self._apps.load(principal, app_id, "deploy.write")
        return self._operated(view, await self._engine.stop(view.app))

    async def start(
        self, principal: Principal, app_id: int, *, progress: Progress = _quiet
    ) -> Operated:
        """Start a stopped app's live release again."""
        view = await self._apps.load(principal, app_id, "deploy.write")
        return self._operated(view, await self._engine.start(view.app, progress))

    async def scale(
        self, principal: Principal, app_id: int, instances: int, *, progress: Progress = _quiet
    ) -> Operated:
        """Run ``instances`` instances of the live release now, without a new release."""
        view = await self._apps.load(principal, app_id, "deploy.write")
        state = await self._engine.scale(view.app, instances, progress, by=principal)
        return self._operated(view, state)

    async def cancel(
        self, principal: Principal, app_id: int, number: int | None = None
    ) -> DeploymentView:
        """Cancel the deployment in progress, as ``tasks/cancel`` on its task would."""
        view = await self._apps.load(principal, app_id, "deploy.write")
        return self._view(view, await self._engine.cancel(view.app, number))

    async def list(
        self,
        principal: Principal,
        app_id: int,
        *,
        states_: list[str] | None = None,
        offset: int = 0,
        limit: int = 20,
    ) -> list[DeploymentView]:
        """Newest first."""
        view = await self._apps.load(principal, app_id, "deploy.read")
        records = await self._engine.store.for_app(
            app_id, states=states_, offset=offset, limit=limit
        )
        return [self._view(view, r) for r in records]

    async def latest(self, views: Sequence[AppView]) -> dict[int, DeploymentBrief]:
        """The newest deployment of each app in ``views`` (already loaded for their caller,
        as :meth:`AppService.list_apps` gives them), briefly: one query."""
        return await self._engine.store.latest_for(v.app.id for v in views)

    async def get(self, principal: Principal, app_id: int, number: int) -> DeploymentView:
        view = await self._apps.load(principal, app_id, "deploy.read")
        return self._view(view, await self._record(app_id, number))

    async def live(self, principal: Principal, app_id: int) -> DeploymentView | None:
        view = await self._apps.load(principal, app_id, "deploy.read")
        record = await self._engine.live(app_id)
        return self._view(view, record) if record is not None else None

    async def settle(self) -> None:
        """Wait (bounded) for deploys that outlived their callers, then the engine's own
        background work."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=30)
        await self._engine.settle()

    async def _record(self, app_id: int, number: int) -> DeploymentRecord:
        record = await self._engine.store.get(app_id, number)
        if record is None:
            raise NotFound(f"app {app_id} has no deployment {number}")
        return record

    @staticmethod
    def _view(view: AppView, record: DeploymentRecord) -> DeploymentView:
        return DeploymentView(view.app, record, view.url)

    @staticmethod
    def _operated(view: AppView, state: RunState) -> Operated:
        live = None if state.live is None else DeploymentView(state.app, state.live, view.url)
        return Operated(state.app, live, state.stopped, state.running)


@dataclass(frozen=True, slots=True)
class Operated:
    """An app after a stop, start or scale: its live deployment (if any) and how it runs."""

    app: AppRecord
    live: DeploymentView | None
    stopped: bool
    running: int
    """Instances of the live release running now."""
