"""RepoSources: the read half of an app's repository connection, built before the services
that need it (issue 25 §1, the constructor ports of docs/runtime-seam.md §2.4).

The deploy engine (a connected repository is the app's source: ``connected``, ``source``),
preflight (``url``), CI (``source``, ``connection``, and the GitHub commit statuses it reports)
and a push's deploy waiting its turn (``is_newest``) read a connection; none of them connects,
disconnects or takes a webhook, which is :class:`~.service.RepoService`'s job, built after
them over this same object. So nothing is wired after construction, and no service holds
another that holds it back.

A checkout (``source``) prunes the app's other checkouts afterwards, keeping those ``keep``
names (:func:`.prune.kept_commits`, over the deployments' store, which exists before both).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final

from appdeck.common.errors import AppDeckError, FailedPrecondition, InvalidArgument
from appdeck.platform.crypto import Sealer
from appdeck.platform.repos import urls
from appdeck.platform.repos.git import Git, GitError, Remote, unavailable
from appdeck.platform.repos.github import GitHub, github_repository
from appdeck.platform.repos.hosted import HostedRepos
from appdeck.platform.sources import SourceRoots
from appdeck.storage.apps import AppRecord
from appdeck.storage.repos import RepoRecord, RepoStore

log = logging.getLogger("appdeck.repos")

KeepCommits = Callable[[int], Awaitable[set[str]]]
"""The commits whose checkouts an app keeps (:func:`.prune.kept_commits`)."""
COMMIT: Final = re.compile(r"[0-9a-f]{7,64}")
"""A commit to deploy: a full sha, or a prefix git resolves in the app's cache (one that
names no commit, or several, is refused as not on the branch)."""


class RepoSources:
    def __init__(
        self,
        store: RepoStore,
        git: Git,
        sealer: Sealer,
        roots: SourceRoots,
        *,
        hosted: HostedRepos | None = None,
        keep: KeepCommits | None = None,
    ) -> None:
        self.store = store
        self.git = git
        self.hosted = hosted
        """The apps' hosted repositories (url ``hosted``: :mod:`.hosting`); None: off."""
        self._sealer = sealer
        self._roots = roots
        self._keep = keep
        self.github = GitHub()
        """The GitHub adapter (statuses, a token's repositories); not tried on github.com."""

    # -- a connection, as stored --------------------------------------------------------

    async def connected(self, app_id: int) -> bool:
        return await self.store.get(app_id) is not None

    async def connection(self, app_id: int) -> RepoRecord | None:
        """The app's connection as stored (sealed token and secret: never shown as is)."""
        return await self.store.get(app_id)

    async def url(self, app_id: int) -> str | None:
        """The connected repository's URL (never with credentials), if any."""
        record = await self.store.get(app_id)
        return None if record is None else record.url

    async def is_newest(self, app_id: int, commit: str) -> bool:
        """Whether ``commit`` is still the newest commit received for the app (no push since,
        the repository still connected): a push's deploy waiting its turn goes on only then."""
        record = await self.store.get(app_id)
        return record is not None and record.last_commit == commit

    # -- a deployment's source (the deploy engine's GitSource) ----------------------------

    async def source(self, app: AppRecord, commit: str | None) -> dict[str, Any] | None:
        """The app's repository checked out at ``commit`` (default: its branch's head), as a
        deployment's ``source``; ``None`` when no repository is connected."""
        record = await self.store.get(app.id)
        if record is None:
            return None
        if commit is not None and not COMMIT.fullmatch(commit):
            raise InvalidArgument("commit must be a hex sha, whole or its first 7+ digits")
        remote = self.stored_remote(app, record)
        try:
            found = await self.git.resolve(app.id, remote, record.branch, commit)
            path = await self.git.checkout(app.id, found.sha, remote)
        except GitError as exc:
            raise failed(app.id, exc, "the commit could not be checked out") from None
        await self._prune(app.id, found.sha)
        return {
            "kind": "git",
            "path": str(path),
            "url": record.url,
            "branch": record.branch,
            "commit": found.sha,
            "message": found.message,
        }

    async def _prune(self, app_id: int, current: str) -> None:
        """Drop the app's checkouts no deployment worth keeping uses (never ``current``)."""
        if self._keep is None:
            return
        try:
            keep = await self._keep(app_id) | {current}
            await asyncio.to_thread(self.git.prune, app_id, keep)
        except Exception:  # a checkout left behind is no reason to fail the deploy
            log.exception("pruning the checkouts of app %s failed", app_id)

    # -- where git reads from -----------------------------------------------------------

    def remote(self, app: AppRecord, parsed: urls.GitUrl, token: str | None) -> Remote:
        if parsed.kind == "hosted":
            if self.hosted is None:
                raise FailedPrecondition("hosted repositories are off on this server")
            return Remote(str(self.hosted.path(app.id)))
        if parsed.kind == "local":
            assert parsed.path is not None
            checked = self._roots.check(app.tenant_id, parsed.path)
            return Remote(str(checked))
        return Remote(parsed.url, token)

    def stored_remote(self, app: AppRecord, record: RepoRecord) -> Remote:
        token = self._sealer.open(record.token) if record.token else None
        try:
            return self.remote(app, urls.parse(record.url), token)
        except InvalidArgument as exc:
            raise FailedPrecondition(
                f"the connected repository no longer passes the source check: {exc.message}",
                hint=exc.hint,
            ) from None

    # -- GitHub's commit statuses (:mod:`.github`) -----------------------------------------

    async def report_status(
        self,
        app_id: int,
        sha: str,
        state: str,
        context: str,
        description: str,
        target_url: str | None = None,
    ) -> bool:
        """Set a commit status on GitHub (``context`` appdeck/ci or appdeck/deploy) when the
        app's repository is a github.com https URL with a token; else nothing. Never raises: a
        status that could not be set is logged (without the token). Whether it was set."""
        record = await self.store.get(app_id)
        where = github_repository(record.url) if record is not None else None
        if record is None or record.token is None or where is None:
            return False
        try:
            await self.github.create_status(
                self._sealer.open(record.token),
                *where,
                sha,
                state=state,
                context=context,
                description=description,
                target_url=target_url,
            )
        except AppDeckError as exc:
            log.warning("the GitHub status of app %s was not set: %s", app_id, exc.message)
            return False
        return True


def log_output(app_id: int, exc: GitError) -> None:
    if exc.output:  # masked and bounded by :mod:`.git`; the tenant's words, for the log only
        log.info("git on the repository of app %s failed: %s", app_id, exc.output)


def failed(app_id: int, exc: GitError, what: str) -> AppDeckError:
    """``what`` failed, in the platform's words; git's own output goes to the log."""
    log_output(app_id, exc)
    return unavailable(exc, what)
