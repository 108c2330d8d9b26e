"""The frozen snapshot :func:`appdeck.platform.advice.steps.advise` reads, and the two ports
the snapshot is gathered through besides the platform's own services: CI (issue 11's
``CIService.status``) and the API catalogue (issue 12, which does not exist yet: its default
answers ``unknown``, and an unknown catalogue never produces a step).

Everything here is plain data: no I/O, no service, so the advice is a pure function of it and
is tested state by state (tests/platform/advice/test_steps.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from appdeck.platform import access

SHA: Final = re.compile(r"[0-9a-f]{40}")

ApiState = Literal["unknown", "none", "found"]
"""What the API catalogue knows of an app: nothing (no catalogue, or not asked), that it
looked and found no API, or that it found one."""

CI_RUNNING: Final = frozenset({"queued", "running"})
CI_RED: Final = frozenset({"failed", "error", "timed_out"})
CI_GREEN: Final = "passed"


class CIStatusLike(Protocol):
    """What whats_next reads of an app's CI (H1's ``platform.ci.CIStatus`` has at least this)."""

    @property
    def configured(self) -> bool: ...
    @property
    def require_green(self) -> bool: ...
    @property
    def auto_deploy(self) -> bool: ...
    @property
    def last_run_number(self) -> int | None: ...
    @property
    def last_run_state(self) -> str | None: ...
    @property
    def last_run_commit(self) -> str | None: ...


class CIStatusSource(Protocol):
    """The CI service as whats_next uses it: ``None`` when the app has no CI configured. No
    principal: the caller already passed ``app.read``."""

    async def status(self, app_id: int) -> CIStatusLike | None: ...


class ApiCatalogPort(Protocol):
    """The API catalogue as whats_next uses it (issue 12 plugs its service in here)."""

    async def state(self, app_id: int) -> ApiState: ...


class UnknownApis:
    """The default catalogue: it knows nothing, so no API step is ever suggested."""

    async def state(self, app_id: int) -> ApiState:
        return "unknown"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: their role on the app and the scopes of their token (``None``: every scope,
    as for the anonymous caller of a server without an authenticator)."""

    role: str
    scopes: frozenset[str] | None

    def may(self, scopes: tuple[str, ...], action: str | None) -> bool:
        """Whether the caller's token and role let them call a tool needing ``scopes`` and,
        on the app, the role ``action`` (``None``: no role on an app is needed)."""
        if self.scopes is not None and not set(scopes) <= self.scopes:
            return False
        return action is None or access.allows(self.role, action)


@dataclass(frozen=True, slots=True)
class Deploy:
    """One deployment as the advice needs it."""

    number: int
    state: str
    commit: str | None
    """The git commit it was built from (``None``: a folder on the server)."""
    started: bool
    """Whether it got past its build (reached starting): where to look when it failed."""
    went_live: bool = False
    """Whether it was ever live: ``rolled_back`` after that was someone's rollback (past it),
    not a failed deploy."""


@dataclass(frozen=True, slots=True)
class Repo:
    last_commit: str | None
    """The newest commit a push or poll recorded on the connected branch (``None``: none
    since it was connected)."""


@dataclass(frozen=True, slots=True)
class CI:
    """An app's CI, when it is configured."""

    require_green: bool
    auto_deploy: bool
    last_run_number: int | None
    last_run_state: str | None
    last_run_commit: str | None

    @property
    def running(self) -> bool:
        return self.last_run_state in CI_RUNNING

    @property
    def red(self) -> bool:
        return self.last_run_state in CI_RED

    def green_for(self, commit: str | None) -> bool:
        return (
            commit is not None
            and self.last_run_state == CI_GREEN
            and (self.last_run_commit == commit)
        )

    @classmethod
    def of(cls, status: CIStatusLike | None) -> CI | None:
        if status is None or not status.configured:
            return None
        return cls(
            require_green=bool(status.require_green),
            auto_deploy=bool(status.auto_deploy),
            last_run_number=status.last_run_number,
            last_run_state=status.last_run_state,
            last_run_commit=status.last_run_commit,
        )


@dataclass(frozen=True, slots=True)
class AppState:
    """Everything the advice for one app depends on."""

    app_id: int
    name: str
    caller: Caller
    runtime: str = "python"
    has_source_path: bool = False
    has_run_command: bool = False
    needs_restart: bool = False
    """Env vars changed since the live release started."""
    stopped: bool = False
    """Stopped by its operator (restart_app action stop)."""
    repo: Repo | None = None
    newest: Deploy | None = None
    live: Deploy | None = None
    can_roll_back: bool = False
    """The release before the live one can come back (it is superseded or rolled back)."""
    ci: CI | None = None
    apis: ApiState = "unknown"


def short(commit: str | None) -> str:
    """A commit as the advice names it (only a real sha is ever repeated back)."""
    if commit is None or not SHA.fullmatch(commit):
        return "an unknown commit"
    return commit[:12]
