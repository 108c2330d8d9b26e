"""CIService: an app's CI configuration, its runs, and what a push or a deploy asks of them.

The rules:

- **Configure** needs ``ci.manage`` (developer) and a connected repository; CI follows the
  connected branch (``branch``, when given, must be that branch). ``test_command``: 1 to
  4,000 characters, no NUL; ``timeout_seconds`` 1 to 3,600 (default 600); ``strategy`` one of
  deploy_app's or None (the spec's default). Reads need ``app.read`` (viewer).
- **A received commit** (webhook push or poll, :meth:`on_push`) on a configured app starts a
  run: queued → running → passed | failed | timed_out | error. One run at a time per app
  (the others wait their turn, in order). A passed run with ``auto_deploy`` deploys that
  commit as the user who connected the repository, and records the deployment's number; any
  other outcome deploys nothing. Without a configuration the connection's own rule applies.
- **require_green**: a deploy of a commit from the repository is refused (failed_precondition)
  unless that exact commit has a passed run (:class:`.gate.CIGate`, the deploy engine's
  ``gate``, built before both over the runs' store). A deploy not from the repository (none
  connected any more) is not gated: there is nothing to test.
- **A restart** ends the runs a dead server process left queued or running as ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from appdeck.common.errors import (
    AppDeckError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from appdeck.common.identity import Principal
from appdeck.common.unwinding import to_the_end
from appdeck.model.release import AppSpec
from appdeck.model.specs import STRATEGIES
from appdeck.observability import ci as ci_metrics
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.ci.runner import CIRunner, Job, Outcome
from appdeck.platform.env import EnvService
from appdeck.platform.repos.git import SHA
from appdeck.platform.repos.service import PushOutcome, Received
from appdeck.platform.repos.sources import RepoSources
from appdeck.storage.apps import AppRecord
from appdeck.storage.ci import CIConfigRecord, CIRunRecord, CIStore

__all__ = ["CIConfigView", "CIRunRecord", "CIService", "CIStatus"]

log = logging.getLogger("appdeck.ci")

MAX_COMMAND: Final = 4000
DEFAULT_TIMEOUT_S: Final = 600
MAX_TIMEOUT_S: Final = 3600
ACTIVE: Final = ("queued", "running")
ENDED: Final = ("passed", "failed", "timed_out", "error", "cancelled")
MAX_WAITING: Final = 10
"""Runs of one app queued or running at once here; more pushes are recorded, not tested."""
KEEP_RUNS: Final = 200
"""Runs (and their logs) kept per app."""
GITHUB_STATES: Final = {"passed": "success", "failed": "failure", "timed_out": "failure"}
"""A run's end as a GitHub commit status (``appdeck/ci``); the rest is ``error``."""

DeployCommit = Callable[[Principal, int, str, str | None], Awaitable[int | None]]
"""Deploys a green commit (principal, app id, commit, strategy): its deployment's number, or
None when a newer push superseded it while it waited for the deploy under way
(``appdeck.platform.pushes.CommitDeploys.number``)."""
Masks = Callable[[int], Awaitable[Callable[[str], str]]]
"""The app's log masker (its env values), as tail_deploy_logs masks them."""


@dataclass(frozen=True, slots=True)
class CIStatus:
    """What whats_next reads of an app's CI."""

    configured: bool
    require_green: bool
    auto_deploy: bool
    last_run_number: int | None
    last_run_state: str | None
    last_run_commit: str | None


@dataclass(frozen=True, slots=True)
class CIConfigView:
    config: CIConfigRecord
    last_run: CIRunRecord | None


class CIService:
    def __init__(
        self,
        apps: AppService,
        store: CIStore,
        repos: RepoSources,
        env: EnvService,
        runner: CIRunner,
        masks: Masks,
        feed: ChangeFeed,
        *,
        deploy: DeployCommit,
        instance_id: str,
    ) -> None:
        self._apps = apps
        self._store = store
        self._repos = repos
        self._env = env
        self._runner = runner
        self._masks = masks
        self._feed = feed
        self._instance = instance_id
        self._deploy = deploy
        """What a green run with auto_deploy calls (deploy_app's path, when the app is free)."""
        self._locks: dict[int, asyncio.Lock] = {}
        self._running: dict[tuple[int, int], asyncio.Task[CIRunRecord]] = {}
        self._making: dict[int, int] = {}
        self._cancelled: weakref.WeakSet[asyncio.Task[CIRunRecord]] = weakref.WeakSet()
        """Runs cancel_all cancelled (see there)."""

    # -- configuration ------------------------------------------------------------------

    async def configure(
        self,
        principal: Principal,
        app_id: int,
        *,
        test_command: str,
        branch: str | None = None,
        auto_deploy: bool = False,
        strategy: str | None = None,
        require_green: bool = False,
        timeout_seconds: int = DEFAULT_TIMEOUT_S,
    ) -> CIConfigView:
        await self._apps.load(principal, app_id, "ci.manage")
        repo = await self._connected(app_id)
        _check_command(test_command)
        if branch is not None and branch != repo:
            raise InvalidArgument(
                f"CI follows the connected branch {repo!r}, not {branch[:200]!r}",
                hint="connect_repo with that branch first, or leave branch out",
            )
        if strategy is not None and strategy not in STRATEGIES:
            raise InvalidArgument(
                f"unknown strategy {strategy[:40]!r}", hint=f"one of {', '.join(STRATEGIES)}"
            )
        if not 1 <= timeout_seconds <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"timeout_seconds must be 1 to {MAX_TIMEOUT_S}")
        values: dict[str, Any] = {
            "branch": branch,
            "test_command": test_command,
            "auto_deploy": auto_deploy,
            "strategy": strategy,
            "require_green": require_green,
            "timeout_seconds": timeout_seconds,
        }
        config = await self._store.configure(app_id, values, principal.user)
        await self._changed(app_id)
        return CIConfigView(config, await self._last(app_id))

    async def get(self, principal: Principal, app_id: int) -> CIConfigView:
        await self._apps.load(principal, app_id, "app.read")
        config = await self._store.config(app_id)
        if config is None:
            raise NotFound(
                f"app {app_id} has no CI configuration",
                hint="manage_ci configure (after connect_repo)",
            )
        return CIConfigView(config, await self._last(app_id))

    async def status(self, app_id: int) -> CIStatus | None:
        config = await self._store.config(app_id)
        if config is None:
            return None
        last = await self._last(app_id)
        return CIStatus(
            configured=True,
            require_green=config.require_green,
            auto_deploy=config.auto_deploy,
            last_run_number=last.number if last else None,
            last_run_state=last.state if last else None,
            last_run_commit=last.commit if last else None,
        )

    # -- runs ---------------------------------------------------------------------------

    async def trigger(
        self, principal: Principal, app_id: int, commit: str | None = None
    ) -> tuple[CIRunRecord, asyncio.Task[CIRunRecord]]:
        """A run of the branch head (or ``commit``, a full sha in the branch's history) as
        ``principal``: the run as recorded, and the task that finishes it."""
        app = (await self._apps.load(principal, app_id, "ci.manage")).app
        config = await self._configured(app_id)
        if commit is not None and not SHA.fullmatch(commit):
            raise InvalidArgument("commit must be a full 40-character hex sha")
        branch = await self._connected(app_id)
        if self._waiting(app_id) >= MAX_WAITING:
            raise Conflict(
                f"{MAX_WAITING} CI runs of app {app_id} are already waiting",
                hint="wait for them (manage_ci runs)",
            )
        source = await self._repos.source(app, commit)  # fetches; refuses a foreign commit
        if source is None:
            raise FailedPrecondition("the app's repository was disconnected", hint="connect_repo")
        record = await self._store.create_run(
            app_id,
            commit=str(source["commit"]),
            message=str(source.get("message") or "")[:2000],
            branch=branch,
            trigger="manual",
            created_by=principal.user,
            instance_id=self._instance,
            state="queued",
        )
        return record, self._start(app, config, record, principal)

    async def runs(
        self, principal: Principal, app_id: int, *, offset: int, limit: int
    ) -> list[CIRunRecord]:
        await self._apps.load(principal, app_id, "app.read")
        return await self._store.runs(app_id, offset=offset, limit=limit)

    async def run(self, principal: Principal, app_id: int, number: int) -> CIRunRecord:
        await self._apps.load(principal, app_id, "app.read")
        record = await self._store.run(app_id, number)
        if record is None:
            raise NotFound(f"app {app_id} has no CI run {number}", hint="manage_ci runs")
        return record

    async def wait(self, app_id: int, number: int, within_s: float | None) -> CIRunRecord:
        """The run once it ended (or as it is after ``within_s`` seconds)."""
        task = self._running.get((app_id, number))
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=within_s)
            if done and not task.cancelled() and task.exception() is None:
                return task.result()
        record = await self._store.run(app_id, number)
        if record is None:  # the app was deleted meanwhile
            raise NotFound(f"app {app_id} has no CI run {number}")
        return record

    # -- what pushes and deploys ask ------------------------------------------------------

    async def on_push(self, got: Received) -> PushOutcome | None:
        config = await self._store.config(got.app.id)
        if config is None or (config.branch is not None and config.branch != got.branch):
            return None
        if self._waiting(got.app.id) >= MAX_WAITING:
            reason = f"{MAX_WAITING} CI runs of this app are already waiting: not tested"
            return PushOutcome("ignored", got.commit, reason=reason)
        self._making[got.app.id] = self._making.get(got.app.id, 0) + 1  # counted from now
        try:
            record = await self._store.create_run(
                got.app.id,
                commit=got.commit,
                message=got.message[:2000],
                branch=got.branch,
                trigger=got.trigger,
                created_by=got.by.user,
                instance_id=self._instance,
                state="queued",
            )
            self._start(got.app, config, record, got.by)
        finally:
            self._making[got.app.id] -= 1
        return PushOutcome("testing", got.commit, reason=f"CI run #{record.number}")

    async def start(self) -> int:
        """After a restart: runs another (dead) server process left unfinished end ``error``."""
        return await self._store.interrupted(
            ACTIVE, self._instance, "interrupted: the server restarted during the run"
        )

    async def settle(self) -> None:
        """Wait for the runs under way here (at shutdown)."""
        tasks = list(self._running.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def cancel_all(self, app_id: int) -> None:
        """Stop the app's runs (its deletion): the sandbox kills what they started. The run is
        remembered too: a cancel that lands in a database call can be swallowed by the
        driver (seen on PostgreSQL under load), and the run must still not start its tests."""
        for (run_app, _), task in list(self._running.items()):
            if run_app == app_id:
                self._cancelled.add(task)
                task.cancel()

    # -- the run itself -----------------------------------------------------------------

    def _waiting(self, app_id: int) -> int:
        made = sum(1 for run_app, _ in self._running if run_app == app_id)
        return made + self._making.get(app_id, 0)

    def _start(
        self, app: AppRecord, config: CIConfigRecord, record: CIRunRecord, by: Principal
    ) -> asyncio.Task[CIRunRecord]:
        key = (app.id, record.number)
        task = asyncio.ensure_future(self._execute(app, config, record, by))
        self._running[key] = task
        task.add_done_callback(lambda _: self._running.pop(key, None))
        return task

    async def _execute(
        self, app: AppRecord, config: CIConfigRecord, record: CIRunRecord, by: Principal
    ) -> CIRunRecord:
        async with self._locks.setdefault(app.id, asyncio.Lock()):
            began = time.monotonic()  # its turn came: the wait behind the app's others is out
            try:
                outcome = await self._test(app, config, record)
            except asyncio.CancelledError:
                ci_metrics.run_ended("cancelled", time.monotonic() - began)
                await to_the_end(self._end(record, Outcome("cancelled", None, "cancelled", "")))
                raise
            except Exception as exc:  # a failure of ours: the run says so, the log has why
                log.exception("CI run %s of app %s failed to run", record.number, app.id)
                outcome = Outcome("error", None, f"the run could not be made: {exc}"[:500], "")
            ci_metrics.run_ended(outcome.state, time.monotonic() - began)
            ended = await self._end(record, outcome)
        if ended.state == "passed" and config.auto_deploy:
            ended = await self._deploy_green(ended, by, config.strategy)
        return ended

    async def _test(self, app: AppRecord, config: CIConfigRecord, record: CIRunRecord) -> Outcome:
        started = await self._store.update(
            app.id,
            record.number,
            from_states=("queued",),
            state="running",
            status_message="Checking out and running the tests",
            started_at=time.time(),
        )
        if not started:
            return Outcome("cancelled", None, "the run was no longer queued", "")
        await self._changed(app.id)
        await self._repos.report_status(
            app.id, record.commit, "pending", "appdeck/ci", f"CI run #{record.number} running"
        )
        current = await self._apps.store.get(app.id)
        if current is None:  # deleted meanwhile (its cancel may have been lost in a query)
            return Outcome("cancelled", None, "the app was deleted", "")
        source = await self._repos.source(current, record.commit)
        if source is None:
            return Outcome("error", None, "the repository was disconnected", "")
        spec = AppSpec.from_dict(current.spec)
        # the test command is a developer's code: it gets the app's secrets only when an
        # admin asked for it (ci.secrets); masking its log is a courtesy, not a boundary
        env = await self._env.resolved(
            app.id, dict(current.spec.get("env") or {}), secrets=spec.ci_secrets
        )
        job = Job(
            app_id=app.id,
            app_name=current.name,
            run=record.number,
            spec=spec,
            env=env,
            source=Path(str(source["path"])),
            test_command=config.test_command,
            timeout_s=float(config.timeout_seconds),
        )
        masks = await self._masks(app.id)
        if asyncio.current_task() in self._cancelled:  # a cancel a driver swallowed
            raise asyncio.CancelledError
        return await self._runner.run(job, masks)

    async def _end(self, record: CIRunRecord, outcome: Outcome) -> CIRunRecord:
        await self._store.update(
            record.app_id,
            record.number,
            from_states=ACTIVE,
            state=outcome.state,
            status_message=outcome.message,
            exit_code=outcome.exit_code,
            log=outcome.log,
            finished_at=time.time(),
        )
        await self._changed(record.app_id)
        github = GITHUB_STATES.get(outcome.state, "error")
        description = f"CI run #{record.number}: {outcome.message}"[:140]
        await self._repos.report_status(
            record.app_id, record.commit, github, "appdeck/ci", description
        )
        await self._store.prune(record.app_id, KEEP_RUNS)
        ended = await self._store.run(record.app_id, record.number)
        return ended or record  # None: the app (and its runs) deleted meanwhile

    async def _deploy_green(
        self, run: CIRunRecord, by: Principal, strategy: str | None
    ) -> CIRunRecord:
        try:
            number = await self._deploy(by, run.app_id, run.commit, strategy)
        except AppDeckError as exc:  # refused (a role lost, a deploy under way): said
            message = f"the tests passed; the deploy was refused: {exc.message}"[:500]
            await self._store.update(run.app_id, run.number, status_message=message)
        except Exception:
            log.exception("the deploy of green run %s of app %s failed", run.number, run.app_id)
            message = "the tests passed; the deploy failed (the server log says why)"
            await self._store.update(run.app_id, run.number, status_message=message)
        else:
            if number is None:
                message = "the tests passed; not deployed: a newer push came while it waited"
                await self._store.update(run.app_id, run.number, status_message=message)
            else:
                await self._store.update(
                    run.app_id,
                    run.number,
                    deployment=number,
                    status_message=f"the tests passed; deployed as deployment {number}",
                )
        await self._changed(run.app_id)
        updated = await self._store.run(run.app_id, run.number)
        return updated or run  # None: the app deleted meanwhile

    # -- helpers ------------------------------------------------------------------------

    async def _connected(self, app_id: int) -> str:
        record = await self._repos.connection(app_id)
        if record is None:
            raise FailedPrecondition(
                f"app {app_id} has no connected repository", hint="connect_repo first"
            )
        return record.branch

    async def _configured(self, app_id: int) -> CIConfigRecord:
        config = await self._store.config(app_id)
        if config is None:
            raise FailedPrecondition(
                f"app {app_id} has no CI configuration", hint="manage_ci configure first"
            )
        return config

    async def _last(self, app_id: int) -> CIRunRecord | None:
        runs = await self._store.runs(app_id, offset=0, limit=1)
        return runs[0] if runs else None

    async def _changed(self, app_id: int) -> None:
        app = await self._apps.store.get(app_id)
        if app is not None:
            await self._feed.emit(Change("app.updated", app.tenant_id, app_id))


def _check_command(command: str) -> None:
    if not command.strip():
        raise InvalidArgument("test_command must not be empty")
    if len(command) > MAX_COMMAND:
        raise InvalidArgument(f"test_command is longer than {MAX_COMMAND} characters")
    if "\0" in command:
        raise InvalidArgument("test_command must not contain NUL characters")
