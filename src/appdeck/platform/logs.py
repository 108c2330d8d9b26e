"""Reading a deployment's build and runtime logs, with the app's env values masked.

Logs are written by app code and build commands, so they are as sensitive as the env (an app
may print it) and as untrusted as the app (DESIGN.md §5, the trust boundary). The rules:

- **Who reads.** ``deploy.read`` on the app (viewer and up), the same as the deployments
  themselves: a viewer debugging a failed deploy needs the build log.
- **What is masked.** Every *known env value* of the app is replaced by ``[masked:NAME]`` in
  every line returned: the app's env vars as they are now and the frozen env of the deployment
  being read (a release keeps the values it was deployed with, which may have changed since),
  except the entries the release's own spec set (``spec.env``, readable by any viewer). A
  multi-line value (a PEM key) is masked line by line. Pieces shorter than
  :data:`MIN_MASKED` characters are left alone: masking ``1`` or ``on`` would mangle every line
  and hide nothing worth hiding.
- **Who sees values.** Nobody by default, admins included: logs end up in agent transcripts.
  A caller who may reveal env values (``env.reveal``: admin or owner) asks with
  ``reveal=True``; anyone else asking is refused, as ``env_vars get`` with ``reveal`` is.
- **grep** is matched against the *masked* text for a masked caller. Matching the raw text
  would answer "does the log contain ``SECRET=a``?", then ``SECRET=ab``…: the value one
  character at a time. So the driver's own grep (which sees raw text) is used only when nothing
  is masked; otherwise lines are read unfiltered and filtered here, looking at no more than
  :data:`SCAN_LINES` lines per call.

Masking is a guard against accidental disclosure (an app that logs its config), not against a
developer's code: whoever may deploy code runs it with the env and can print it encoded. The
line between roles that may and may not hold the values is drawn at deploy, not here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Final, Protocol

from appdeck.common.errors import NotFound
from appdeck.common.identity import Principal
from appdeck.platform import access
from appdeck.platform.apps import AppService
from appdeck.platform.crypto import Sealer
from appdeck.platform.deploy import states
from appdeck.platform.env import EnvService, thaw
from appdeck.runtime.driver import LogKind, LogLine, LogPage
from appdeck.storage.deployments import DeploymentRecord, DeploymentStore

__all__ = ["MIN_MASKED", "SCAN_LINES", "LogKind", "LogQuery", "LogService", "LogView", "Masker"]

MIN_MASKED: Final = 4
"""Shorter values (or lines of a multi-line value) are not masked."""
SCAN_LINES: Final = 10_000
"""At most this many lines are read per call when a masked caller filters with grep."""
_BATCH: Final = 1_000


class LogSource(Protocol):
    """The part of the runtime driver this service reads (see ``Driver``)."""

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage: ...

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage: ...


class Masker:
    """Replaces known values by ``[masked:NAME]``: one compiled alternation of the escaped
    values, longest first (so a value that contains another is masked whole), built once per
    call and run over each line."""

    def __init__(self, values: Iterable[tuple[str, str]] = ()) -> None:
        names: dict[str, str] = {}
        for name, value in sorted(values):
            for piece in value.splitlines():
                if len(piece) >= MIN_MASKED:
                    names.setdefault(piece, name)
        self._names = names
        pieces = sorted(names, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, pieces))) if pieces else None

    def __bool__(self) -> bool:
        """False when there is nothing to mask."""
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: f"[masked:{self._names[m.group()]}]", text)


@dataclass(frozen=True, slots=True)
class LogQuery:
    kind: LogKind = "runtime"
    cursor: int | None = None
    """The ``next_cursor`` of a previous page; None: the newest lines (or, following, now)."""
    limit: int = 100
    grep: str | None = None
    """Keep lines containing it (case-insensitive)."""
    follow: bool = False
    wait_s: float = 10.0
    """How long ``follow`` waits for a line."""
    reveal: bool = False
    """Show env values unmasked (needs ``env.reveal``)."""


@dataclass(frozen=True, slots=True)
class LogView:
    app_id: int
    number: int
    kind: LogKind
    lines: list[LogLine]
    next_cursor: int
    masked: bool
    """True unless the caller asked to reveal (and may)."""


class LogService:
    def __init__(
        self,
        apps: AppService,
        env: EnvService,
        deployments: DeploymentStore,
        source: LogSource,
        sealer: Sealer,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._apps = apps
        self._env = env
        self._deployments = deployments
        self._source = source
        self._sealer = sealer
        self._clock = clock

    async def read(
        self, principal: Principal, app_id: int, number: int | None, query: LogQuery
    ) -> LogView:
        """One page of a deployment's log (``number`` None: the live one, else the newest)."""
        view = await self._apps.load(principal, app_id, "deploy.read")
        if query.reveal:
            access.require("env.reveal", view.role, app_ref=str(app_id))
        record = await self._deployment(app_id, number)
        masker = Masker() if query.reveal else await self.masker(app_id, record)
        page = await self._page(record.release_id, query, masker)
        lines = [replace(line, text=masker(line.text)) for line in page.lines]
        return LogView(app_id, record.number, query.kind, lines, page.next_cursor, not query.reveal)

    async def masker(self, app_id: int, record: DeploymentRecord | None = None) -> Masker:
        """What to mask for ``app_id``: its env vars now and ``record``'s frozen env, minus
        what the record's spec set itself (no role check: for callers that made theirs)."""
        pairs = list((await self._env.resolved(app_id, {})).items())
        if record is not None:
            defaults = record.spec.get("env") or {}
            frozen, _ = thaw(self._sealer.open(record.env))
            pairs += [(n, v) for n, v in frozen.items() if defaults.get(n) != v]
        return Masker(pairs)

    async def _deployment(self, app_id: int, number: int | None) -> DeploymentRecord:
        if number is not None:
            record = await self._deployments.get(app_id, number)
            if record is None:
                raise NotFound(f"app {app_id} has no deployment {number}")
            return record
        found = await self._deployments.for_app(app_id, states=[states.LIVE], limit=1)
        found = found or await self._deployments.for_app(app_id, limit=1)
        if not found:
            raise NotFound(f"app {app_id} has no deployment yet", hint="deploy_app first")
        return found[0]

    async def _page(self, release_id: str, query: LogQuery, masker: Masker) -> LogPage:
        source, kind = self._source, query.kind
        if not query.grep or not masker:  # the driver may filter: nothing it sees is hidden
            if query.follow:
                return await source.follow(
                    release_id, kind, query.cursor, query.limit, query.grep, timeout_s=query.wait_s
                )
            return await source.logs(release_id, kind, query.cursor, query.limit, query.grep)
        needle = query.grep.lower()

        def keep(line: LogLine) -> bool:
            return needle in masker(line.text).lower()

        if query.cursor is None and not query.follow:
            newest = await source.logs(release_id, kind, None, SCAN_LINES)
            return LogPage([x for x in newest.lines if keep(x)][-query.limit :], newest.next_cursor)
        deadline = self._clock() + max(query.wait_s, 0.0)

        async def fetch(cursor: int | None) -> LogPage:
            if query.follow:
                left = max(deadline - self._clock(), 0.0)
                return await source.follow(release_id, kind, cursor, _BATCH, timeout_s=left)
            return await source.logs(release_id, kind, cursor, _BATCH)

        def more(page: LogPage, cursor: int | None, kept: int) -> bool:
            if query.follow:  # until a line is kept or the wait is over
                return kept == 0 and self._clock() < deadline
            return page.next_cursor != cursor  # until the end of the log

        return await _scan(fetch, query.cursor, query.limit, keep, more)


async def _scan(
    fetch: Callable[[int | None], Awaitable[LogPage]],
    cursor: int | None,
    limit: int,
    keep: Callable[[LogLine], bool],
    more: Callable[[LogPage, int | None, int], bool],
) -> LogPage:
    """Pages after ``cursor`` until ``limit`` lines are kept, ``more`` says stop, or
    :data:`SCAN_LINES` lines were read. The cursor returned is the last line looked at, so
    the next call misses nothing and repeats nothing."""
    kept: list[LogLine] = []
    scanned = 0
    while True:
        page = await fetch(cursor)
        for line in page.lines:
            if keep(line):
                kept.append(line)
                if len(kept) >= limit:
                    return LogPage(kept, line.seq)
        scanned += len(page.lines)
        go_on = more(page, cursor, len(kept)) and scanned < SCAN_LINES
        cursor = page.next_cursor
        if not go_on:
            return LogPage(kept, cursor)
