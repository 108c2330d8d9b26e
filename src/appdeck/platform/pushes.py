"""What a received commit does: the push policy (issue 25 §1; docs/runtime-seam.md §2.4, F5).

A new commit on an app's connected branch (a webhook push, a poll, a ``git push`` to the hosted
remote) is recorded by :class:`~appdeck.platform.repos.service.RepoService`, which then asks
its ``on_commit`` port, :class:`PushPolicy`, what to do and answers the webhook with the
policy's :class:`PushOutcome`:

1. an app with a CI configuration for the branch: CI tests it (``testing``, or ``ignored``
   when too many runs wait); a green run with ``auto_deploy`` deploys it (CI's ``deploy``
   port, :meth:`CommitDeploys.number`);
2. else a connection with ``auto_deploy``: it is deployed in the background (``deploying``),
   its progress reported to GitHub as the ``appdeck/deploy`` commit status;
3. else ``recorded``.

The answer is a return value, not a change-feed listener's doing: the feed returns nothing and
swallows its listeners' errors. The feed gets ``commit.received`` for observers only.

Every deploy of a pushed commit goes through deploy_app's path, after the deploy under way and
only while the commit is still the branch's newest (:func:`.deploy.queued.when_free`).

Built last, over CI and the deployments: nothing here is wired after construction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from appdeck.common.errors import AppDeckError
from appdeck.common.identity import Principal
from appdeck.platform.ci.service import CIService
from appdeck.platform.deploy.deployments import Deployments, DeploymentView
from appdeck.platform.deploy.queued import when_free
from appdeck.platform.repos.service import PushOutcome, Received
from appdeck.platform.repos.sources import RepoSources

log = logging.getLogger("appdeck.repos")

DEPLOY_STATUS: Final = "appdeck/deploy"
"""The GitHub commit status context of a push's deploy (CI's is ``appdeck/ci``)."""
SETTLE_S: Final = 600.0

DeployPush = Callable[[Principal, int, str], Awaitable[DeploymentView | None]]
"""Deploys a pushed commit as the user who connected the repository: the deployment once it
ended, or None when a newer push superseded it while it waited (:class:`CommitDeploys`)."""


class CommitDeploys:
    """A received commit deployed through deploy_app's path: after the deploy under way, and
    only while it is still the newest commit received (``newest``: ``RepoSources.is_newest``)."""

    def __init__(
        self, deployments: Deployments, newest: Callable[[int, str], Awaitable[bool]]
    ) -> None:
        self._deployments = deployments
        self._newest = newest

    async def __call__(
        self, by: Principal, app_id: int, commit: str, strategy: str | None = None
    ) -> DeploymentView | None:
        return await when_free(
            lambda: self._deployments.deploy(by, app_id, strategy, wait_s=None, commit=commit),
            lambda: self._newest(app_id, commit),
        )

    async def number(
        self, by: Principal, app_id: int, commit: str, strategy: str | None
    ) -> int | None:
        """CI's ``deploy`` port: the deployment's number (None: superseded while waiting)."""
        view = await self(by, app_id, commit, strategy)
        return None if view is None else view.record.number


class PushPolicy:
    def __init__(self, ci: CIService, deploy: DeployPush, statuses: RepoSources) -> None:
        self._ci = ci
        self._deploy = deploy
        self._statuses = statuses
        self._aside: set[asyncio.Task[None]] = set()

    async def __call__(self, got: Received) -> PushOutcome:
        """The outcome of a received commit (the webhook's answer): see the module's rules."""
        tested = await self._ci.on_push(got)
        if tested is not None:
            return tested
        if not got.auto_deploy:
            return PushOutcome("recorded", got.commit)
        self._background(got.app.id, self._deploy_reported(got.by, got.app.id, got.commit))
        return PushOutcome("deploying", got.commit)

    async def settle(self) -> None:
        """Wait for push deploys under way (tests, shutdown)."""
        if self._aside:
            await asyncio.wait(set(self._aside), timeout=SETTLE_S)

    async def _deploy_reported(
        self, by: Principal, app_id: int, commit: str
    ) -> DeploymentView | None:
        """The deploy, its progress told to GitHub (when the repository is a github.com
        https URL with a token: :meth:`RepoSources.report_status`)."""
        report = self._statuses.report_status
        await report(app_id, commit, "pending", DEPLOY_STATUS, "deploying")
        try:
            done = await self._deploy(by, app_id, commit)
        except Exception:
            await report(app_id, commit, "error", DEPLOY_STATUS, "the deploy did not run")
            raise
        if done is None:  # it waited for the deploy under way, and a newer push came
            state, said = "error", "not deployed: superseded by a newer push"
        elif done.live:
            state, said = "success", "live"
        else:
            state, said = "failure", "the deploy did not go live"
        await report(app_id, commit, state, DEPLOY_STATUS, said)
        return done

    def _background(self, app_id: int, work: Awaitable[object]) -> None:
        async def run() -> None:
            try:
                await work
            except AppDeckError as exc:  # refused (a role lost, a checkout refused): logged
                log.warning("the push deploy of app %s did not run: %s", app_id, exc.message)
            except Exception:
                log.exception("the push deploy of app %s failed", app_id)

        task = asyncio.create_task(run())
        self._aside.add(task)
        task.add_done_callback(self._aside.discard)
