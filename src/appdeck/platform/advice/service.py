"""AdviceService: gathers an app's state from the platform's services (the app and its spec,
its repository, its deployments, its CI and API catalogue through their ports) into a frozen
:class:`~appdeck.platform.advice.state.AppState`, and asks the pure
:func:`~appdeck.platform.advice.steps.advise` what comes next.

Reading advice needs ``app.read`` (viewer): another tenant's app, or an app the caller has no
role on, is not found. What the steps suggest is filtered by the caller's role and token
scopes in :mod:`.steps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from appdeck.common.errors import NotFound
from appdeck.common.identity import Principal
from appdeck.platform.advice.state import (
    CI,
    ApiCatalogPort,
    AppState,
    Caller,
    CIStatusSource,
    Deploy,
    Repo,
    UnknownApis,
)
from appdeck.platform.advice.steps import Advice, advise, advise_account
from appdeck.platform.apps import AppService, AppView
from appdeck.platform.deploy import states
from appdeck.platform.deploy.deployments import Deployments, DeploymentView
from appdeck.platform.repos.service import RepoService

COME_BACK = frozenset({states.SUPERSEDED, states.ROLLED_BACK})
"""A release a rollback can put back live."""
STARTED = frozenset({states.STARTING, states.CANARY, states.LIVE})
"""A deployment that reached one of these got past its build."""


@dataclass(frozen=True, slots=True)
class AppAdvice:
    app_id: int
    name: str
    advice: Advice


@dataclass(frozen=True, slots=True)
class AccountAdvice:
    apps: tuple[AppAdvice, ...]
    advice: Advice
    """The first step of each app, the urgent ones first."""


class AdviceService:
    def __init__(
        self,
        apps: AppService,
        deployments: Deployments,
        repos: RepoService,
        *,
        ci: CIStatusSource | None = None,
        apis: ApiCatalogPort | None = None,
    ) -> None:
        self._apps = apps
        self._deployments = deployments
        self._repos = repos
        self._ci = ci
        self._apis: ApiCatalogPort = apis or UnknownApis()

    async def for_app(self, principal: Principal, app_id: int) -> AppAdvice:
        view = await self._apps.load(principal, app_id, "app.read")
        return await self._advise(principal, view)

    async def for_apps(
        self, principal: Principal, views: Sequence[AppView], *, first_page: bool
    ) -> AccountAdvice:
        """Advice for a page of the caller's apps (``list_apps``); an account without apps
        (an empty first page) is told to register one."""
        found = tuple([await self._advise(principal, view) for view in views])
        caller = _caller(principal, "viewer")
        pairs = [(a.app_id, a.advice) for a in found]
        return AccountAdvice(found, advise_account(caller, pairs, empty=first_page and not views))

    async def snapshot(self, principal: Principal, view: AppView) -> AppState:
        """The state the advice for ``view``'s app depends on, read now."""
        app = view.app
        newest = await self._deployments.list(principal, app.id, limit=1)
        live = await self._deployments.live(principal, app.id)
        status = await self._ci.status(app.id) if self._ci is not None else None
        return AppState(
            app_id=app.id,
            name=app.name,
            caller=_caller(principal, view.role),
            runtime=str(app.spec.get("runtime") or "python"),
            has_source_path=bool(app.spec.get("source_path")),
            has_run_command=bool(app.spec.get("run_command")),
            needs_restart=app.needs_restart,
            stopped=app.stopped,
            repo=await self._repo(principal, app.id),
            newest=_deploy(newest[0]) if newest else None,
            live=_deploy(live) if live is not None else None,
            can_roll_back=await self._can_roll_back(principal, live),
            ci=CI.of(status),
            apis=await self._apis.state(app.id),
        )

    async def _advise(self, principal: Principal, view: AppView) -> AppAdvice:
        state = await self.snapshot(principal, view)
        return AppAdvice(view.app.id, view.app.name, advise(state))

    async def _repo(self, principal: Principal, app_id: int) -> Repo | None:
        try:
            found = await self._repos.get(principal, app_id)
        except NotFound:  # the app was just loaded: what is missing is its repository
            return None
        return Repo(found.last_commit)

    async def _can_roll_back(self, principal: Principal, live: DeploymentView | None) -> bool:
        previous = live.record.previous if live is not None else None
        if live is None or previous is None:
            return False
        try:
            before = await self._deployments.get(principal, live.app.id, previous)
        except NotFound:
            return False
        return before.record.state in COME_BACK


def _caller(principal: Principal, role: str) -> Caller:
    scopes = None if principal.kind == "anonymous" else principal.scopes
    return Caller(role, scopes)


def _deploy(view: DeploymentView) -> Deploy:
    record = view.record
    reached = {step.get("state") for step in record.steps if isinstance(step, dict)}
    commit = record.source.get("commit")
    started = bool(reached & STARTED)
    return Deploy(
        record.number,
        record.state,
        commit if isinstance(commit, str) else None,
        started,
        went_live=states.LIVE in reached,
    )
