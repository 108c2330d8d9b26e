"""The rules of a deploy as small policy objects (the shape of Prefect's
``orchestration/core_policy.py``), and the rules around one that are not the deploy itself.

- :class:`CorePolicy` lists the :class:`DeployRule` s a deployment's transitions go through, in
  order: the refusals of ``create`` (the order is wire output: the first that fails is the
  error a caller sees) and what follows a release going live (:class:`SupersedeOld`,
  :class:`ClearNeedsRestart`). A rule names the transitions it applies to
  (``FROM_STATES``/``TO_STATES``; ``None``: no record yet) and has a ``before`` hook (raises to
  refuse) and an ``after`` hook.
- :data:`STRATEGIES`: how each strategy moves traffic (:mod:`.rollout`), and whether it keeps
  the old release warm.
- :func:`wait_seconds` and :func:`rollback_needs_confirmation`: how long a caller waits for a
  deploy, and which rollbacks need a human's confirmation. Pure functions: the services apply
  them, a CLI or a web page gets the same answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final

from appdeck.common.errors import Conflict, FailedPrecondition, InvalidArgument
from appdeck.model import hostnames, specs
from appdeck.platform.deploy import rollout, states
from appdeck.platform.deploy.locks import Hold
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord

if TYPE_CHECKING:
    from appdeck.platform.deploy.core import EngineCore

DEFAULT_WAIT_S: Final = 20.0
"""A deploy not run as a task answers after this long with the deployment so far (it goes on
in the background; list_deployments or the deployments resource follow it)."""
MAX_WAIT_S: Final = 60.0
"""The longest a caller may ask to wait: longer work belongs in a task."""

CREATED: Final[frozenset[str | None]] = frozenset({None})
"""A deployment's ``from`` state before it has a record."""


@dataclass
class DeployContext:
    """What the rules of one deployment read and fill in."""

    app: AppRecord
    by: str
    strategy: str
    commit: str | None
    git: bool = False
    """The app's source is its connected repository (filled by :class:`NeedsSource`)."""
    source: dict[str, Any] | None = None
    """The deployment's frozen source (filled by :class:`ResolveSource`)."""
    live: DeploymentRecord | None = None
    """The release live when the run began, which the new one supersedes."""
    held: Hold | None = None
    """The app's lease, under which the run writes."""


class DeployRule:
    """One rule of a transition: ``before`` raises to refuse it, ``after`` follows it."""

    FROM_STATES: ClassVar[frozenset[str | None]] = CREATED
    TO_STATES: ClassVar[frozenset[str]] = frozenset({states.QUEUED})

    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        return None

    async def after(self, ctx: DeployContext, engine: EngineCore) -> None:
        return None


class DeployPolicy:
    """An ordered list of rules; a transition goes through those that name it."""

    @staticmethod
    def priority() -> list[type[DeployRule]]:
        return []

    @classmethod
    def rules_for(cls, from_state: str | None, to_state: str) -> list[DeployRule]:
        return [
            rule()
            for rule in cls.priority()
            if from_state in rule.FROM_STATES and to_state in rule.TO_STATES
        ]

    @classmethod
    async def before(
        cls, from_state: str | None, to_state: str, ctx: DeployContext, engine: EngineCore
    ) -> None:
        for rule in cls.rules_for(from_state, to_state):
            await rule.before(ctx, engine)

    @classmethod
    async def after(
        cls, from_state: str | None, to_state: str, ctx: DeployContext, engine: EngineCore
    ) -> None:
        for rule in cls.rules_for(from_state, to_state):
            await rule.after(ctx, engine)


# -- create: the refusals, in the order a caller meets them ----------------------------------


class RefuseStopped(DeployRule):
    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        refuse_if_stopped(ctx.app, "a deploy")


class KnownStrategy(DeployRule):
    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        if ctx.strategy not in specs.STRATEGIES:
            raise InvalidArgument(
                f"unknown strategy {ctx.strategy!r}", hint=f"one of {', '.join(specs.STRATEGIES)}"
            )


class NeedsSource(DeployRule):
    """A connected repository, or a ``source_path``; a commit only from a repository."""

    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        ctx.git = engine.git is not None and await engine.git.connected(ctx.app.id)
        if not ctx.git and ctx.commit is not None:
            raise FailedPrecondition(
                "a commit is deployed from a connected repository; this app has none",
                hint="connect_repo first",
            )
        if not ctx.git and not ctx.app.spec.get("source_path"):
            raise FailedPrecondition(
                "the app has no source_path",
                hint="set_app_spec with spec.source_path, or connect_repo, first",
            )


class NeedsRunCommand(DeployRule):
    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        if ctx.app.spec.get("runtime") != "static" and not ctx.app.spec.get("run_command"):
            raise FailedPrecondition(
                "the app has no run_command", hint="set_app_spec with spec.run_command"
            )


class ReclaimOrphan(DeployRule):
    """A deployment in progress refuses a new one, unless nobody drives it (then it ends)."""

    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        running = await engine.in_progress(ctx.app.id)
        if running and not await engine.reclaim_orphan(ctx.app, running):
            raise in_progress(running)


class Routable(DeployRule):
    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        unroutable = hostnames.unroutable_reason(ctx.app.name, ctx.app.tenant_id)
        if unroutable is not None:  # only apps made before the hostname rule can get here
            raise FailedPrecondition(unroutable, hint="rename the app (manage_app update)")


class ResolveSource(DeployRule):
    """The repository's checkout at the commit, or the ``source_path`` checked again now."""

    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        if ctx.git:
            ctx.source = await engine.resolve(ctx.app, ctx.commit)
        else:
            ctx.source = {"path": str(engine.checked_source(ctx.app))}


class RequireGreen(DeployRule):
    """CI's require_green, on the commit resolved."""

    async def before(self, ctx: DeployContext, engine: EngineCore) -> None:
        if engine.gate is not None:
            found = (ctx.source or {}).get("commit")
            await engine.gate(ctx.app.id, found if isinstance(found, str) else None)


# -- a release went live -----------------------------------------------------------------------


class ToLive(DeployRule):
    FROM_STATES = frozenset(states.IN_PROGRESS)
    TO_STATES = frozenset({states.LIVE})


class SupersedeOld(ToLive):
    """The release live before ends superseded, its instances stopped unless the strategy
    keeps them warm (for an instant rollback)."""

    async def after(self, ctx: DeployContext, engine: EngineCore) -> None:
        old, held = ctx.live, ctx.held
        if old is None or held is None:
            return
        keep_warm = STRATEGIES[ctx.strategy].keeps_old_warm
        message = "Superseded" + (" (kept warm for an instant rollback)" if keep_warm else "")
        held.check()
        old_after = await engine.store.update(
            ctx.app.id,
            old.number,
            state=states.SUPERSEDED,
            message=message,
            traffic=0,
            lease=held.lease,
        )
        await engine.announce(ctx.app, old_after)
        if not keep_warm:
            await engine.runtime.stop(old.release_id)


class ClearNeedsRestart(ToLive):
    """The app's env changes are in effect."""

    async def after(self, ctx: DeployContext, engine: EngineCore) -> None:
        await engine.apps.store.update(ctx.app.id, needs_restart=False)


class CorePolicy(DeployPolicy):
    @staticmethod
    def priority() -> list[type[DeployRule]]:
        return [
            RefuseStopped,
            KnownStrategy,
            NeedsSource,
            NeedsRunCommand,
            ReclaimOrphan,
            Routable,
            ResolveSource,
            RequireGreen,
            SupersedeOld,
            ClearNeedsRestart,
        ]


# -- the strategies ----------------------------------------------------------------------------


class Strategy:
    """How a new release takes the traffic (:mod:`.rollout`). ``enter``: the run's step into
    ``canary`` (only the canary takes it)."""

    name: ClassVar[str]
    keeps_old_warm: ClassVar[bool] = False

    async def roll(self, r: rollout.Rollout, enter: Callable[[], Awaitable[None]]) -> None:
        raise NotImplementedError


class Recreate(Strategy):
    name = "recreate"

    async def roll(self, r: rollout.Rollout, enter: Callable[[], Awaitable[None]]) -> None:
        await rollout.recreate(r)


class Rolling(Strategy):
    name = "rolling"

    async def roll(self, r: rollout.Rollout, enter: Callable[[], Awaitable[None]]) -> None:
        await rollout.rolling(r)


class BlueGreen(Strategy):
    name = "blue_green"
    keeps_old_warm = True

    async def roll(self, r: rollout.Rollout, enter: Callable[[], Awaitable[None]]) -> None:
        await rollout.blue_green(r)


class Canary(Strategy):
    name = "canary"

    async def roll(self, r: rollout.Rollout, enter: Callable[[], Awaitable[None]]) -> None:
        canary = r.new.spec.canary
        await rollout.canary(
            r,
            steps=canary.plan(),
            window_s=canary.analysis_window_s,
            max_error_rate=canary.max_error_rate,
            enter=enter,
        )


STRATEGIES: Final[dict[str, Strategy]] = {
    s.name: s for s in (Recreate(), Rolling(), BlueGreen(), Canary())
}
"""Each of ``model.specs.STRATEGIES`` (the list stays there), by name."""


# -- refusals shared with the other operations -------------------------------------------------


class DeployBusy(Conflict):
    """The app's lease is held: a deployment (or a rollback or restart) is under way. A
    deploy asked by a push waits for it (:func:`appdeck.platform.deploy.queued.when_free`)."""


def in_progress(record: DeploymentRecord) -> Conflict:
    return DeployBusy(
        f"deployment {record.number} of this app is still {record.state}",
        hint="wait for it (list_deployments) before deploying again",
    )


def refuse_if_stopped(app: AppRecord, what: str) -> None:
    """A deploy, rollback or restart of a stopped app is refused: it would start it."""
    if app.stopped:
        raise FailedPrecondition(
            f"the app is stopped: {what} would start it",
            hint="restart_app with action start first",
        )


# -- around a deploy ---------------------------------------------------------------------------


def wait_seconds(requested: float | None) -> float:
    """How long a deploy outside a task waits for its outcome."""
    if requested is None:
        return DEFAULT_WAIT_S
    return min(max(float(requested), 0.0), MAX_WAIT_S)


def rollback_needs_confirmation(live: DeploymentRecord | None, number: int | None) -> bool:
    """Going back to the release just before the live one is routine; going further back
    (skipping releases someone shipped since) is destructive and is confirmed first."""
    return number is not None and live is not None and number != live.previous
