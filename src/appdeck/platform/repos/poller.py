"""Polling connected repositories that asked for it (``poll_seconds``): every few seconds the
connections due (``polled_at + poll_seconds <= now``) are checked with ``git ls-remote``, at most
``concurrency`` at a time; a new head goes through :meth:`RepoService.received` as a ``poll``,
the same path as a webhook push.

A failed poll is logged (the reason is git's first line, token scrubbed) and backs off: the
next one waits ``poll_seconds * (2**failures - 1)`` more, at most a day. A disconnected
repository or a deleted app has no row left, so it is not polled again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from appdeck.common.errors import AppDeckError
from appdeck.platform.repos.git import GitError
from appdeck.storage.repos import RepoRecord, RepoStore

if TYPE_CHECKING:
    from appdeck.platform.repos.service import RepoService

log = logging.getLogger("appdeck.repos")

POLL_MIN_S: Final = 60
POLL_MAX_S: Final = 86_400
TICK_S: Final = 5.0
BATCH: Final = 20


class Poller:
    def __init__(
        self,
        service: RepoService,
        store: RepoStore,
        *,
        concurrency: int = 2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._service = service
        self._store = store
        self._slots = asyncio.Semaphore(concurrency)
        self._clock = clock
        self._failures: dict[int, int] = {}
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def poll_once(self) -> dict[int, str]:
        """Poll the connections due now; app id → what happened (``failed`` included)."""
        now = self._clock()
        due = await self._store.due(now, BATCH)
        for record in due:  # taken: a slow poll is not picked up again by the next tick
            await self._store.polled(record.app_id, now)
        results = await asyncio.gather(*(self._one(record, now) for record in due))
        return dict(zip((r.app_id for r in due), results, strict=True))

    async def _one(self, record: RepoRecord, now: float) -> str:
        async with self._slots:
            try:
                status = await self._service.poll(record)
            except (GitError, AppDeckError) as exc:
                reason = exc.reason if isinstance(exc, GitError) else exc.message
                return await self._failed(record, now, reason)
            except Exception:
                log.exception("polling the repository of app %s failed", record.app_id)
                return await self._failed(record, now, "an unexpected error")
        self._failures.pop(record.app_id, None)  # a success, or gone: forgotten
        return status

    async def _failed(self, record: RepoRecord, now: float, reason: str) -> str:
        failures = self._failures.get(record.app_id, 0) + 1
        self._failures[record.app_id] = failures
        every = record.poll_seconds or POLL_MAX_S
        wait = min(every * (2 ** min(failures, 16) - 1), POLL_MAX_S)
        log.warning(
            "polling the repository of app %s failed (%d in a row; next try in %ds): %s",
            record.app_id,
            failures,
            wait + every,
            reason[:300],
        )
        await self._store.polled(record.app_id, now + wait)
        return "failed"

    # -- the loop (Platform.start / shutdown) --------------------------------------------

    def start(self, tick_s: float = TICK_S) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run(tick_s), name="appdeck-repo-poller")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            async with asyncio.timeout(30):
                await task
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, tick_s: float) -> None:
        while not self._stop.is_set():
            try:
                await self.poll_once()
            except Exception:  # the database away for a moment: try again next tick
                log.exception("the repository poller's tick failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(tick_s):
                    await self._stop.wait()
