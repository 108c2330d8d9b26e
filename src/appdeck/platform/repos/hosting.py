"""HostedService: the app's own git remote (``/git/<tenant>/<app>.git``) and inline files.

Who may: fetching needs ``app.read`` on the app, pushing ``repo.connect`` (developer), both
in the caller's own tenant: another tenant's app, a missing one and one the caller has no
role on are the same :class:`NotFound` (the remote never says which apps exist). A push is
a push event when it moves the branch the app is connected to (its connection's url is
``hosted``): :meth:`RepoService.received`, the very path of a webhook push (CI first when
configured, then the connection's ``auto_deploy``). Inline files are committed to the same
repository, by the caller, and the commit is then deployed like any other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from appdeck.common.errors import FailedPrecondition, NotFound, PermissionDenied, Unavailable
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService
from appdeck.platform.repos import inline, urls
from appdeck.platform.repos.git import Git, GitError, Remote
from appdeck.platform.repos.hosted import HostedLimits, HostedRepos, Run
from appdeck.platform.repos.service import PushOutcome, RepoService
from appdeck.storage.apps import AppRecord

log = logging.getLogger("appdeck.repos")
GIT_PATH: Final = "/git/{tenant}/{app}.git"


@dataclass(frozen=True, slots=True)
class Committed:
    sha: str
    branch: str
    changed: bool
    """False: the files were already the branch's content (no new commit)."""
    connected: bool
    """True: this call connected the app to its hosted repository."""


class PushBusy(Unavailable):
    """Another push to this app's repository is under way."""


class Leases(Protocol):
    """Expiring leases every replica shares (the cluster's Redis:
    ``appdeck.events.leases.RedisLeases``), for the per-app push limit across replicas."""

    async def acquire(self, key: str) -> Any | None:
        """The lease on ``key``, or None when someone holds it."""
        ...

    async def release(self, lease: Any) -> None: ...


class HostedService:
    def __init__(
        self,
        apps: AppService,
        repos: RepoService,
        git: Git,
        hosted: HostedRepos,
        *,
        base_url: str = "",
        inline_limits: inline.InlineLimits | None = None,
    ) -> None:
        self._apps = apps
        self._repos = repos
        self._git = git
        self.hosted = hosted
        self.base_url = base_url.rstrip("/")
        self.inline_limits = inline_limits or inline.InlineLimits()
        self._pushing: dict[int, int] = {}
        self.leases: Leases | None = None
        """Replica mode: the push limit holds across replicas (one lease per push slot, which
        outlives a push's time limit; a dead replica's runs out)."""
        self._held: dict[int, list[Any]] = {}

    def pushes_under_way(self) -> int:
        """Push slots taken on this replica now (each a lease in Redis with replicas)."""
        return sum(self._pushing.values())

    @property
    def limits(self) -> HostedLimits:
        return self.hosted.limits

    def push_url(self, tenant: str, app_name: str) -> str:
        """The app's git remote (``git push <it> <branch>``; password: a token)."""
        return self.base_url + GIT_PATH.format(tenant=tenant, app=app_name)

    async def push_url_of(self, app_id: int) -> str | None:
        app = await self._apps.store.get(app_id)
        return None if app is None else self.push_url(app.tenant_id, app.name)

    # -- the remote -------------------------------------------------------------------------

    async def open(self, principal: Principal, tenant: str, name: str, *, write: bool) -> AppRecord:
        """The app behind ``/git/<tenant>/<name>.git`` if the caller may fetch (or push):
        :class:`NotFound` alike for another tenant, no such app, or no role on it."""
        gone = NotFound("no such repository")
        if tenant != principal.tenant:
            raise gone
        app = await self._apps.store.by_name(tenant, name)
        if app is None:
            raise gone
        try:
            await self._apps.load(principal, app.id, "repo.connect" if write else "app.read")
        except PermissionDenied:
            if not write:
                raise gone from None
            raise
        except NotFound:
            raise gone from None
        if not write and not self.hosted.exists(app.id):
            raise gone
        return app

    async def serve(self, app: AppRecord, cgi: dict[str, str], *, write: bool) -> Run:
        """``git http-backend`` for one request (a push: at most ``max_pushes_per_app`` at
        once, refused when the repository is at its size cap). Call :meth:`done` after."""
        if write:
            await self._take_slot(app.id)
            try:
                await self.hosted.ensure(app.id)
                size = await asyncio.to_thread(self.hosted.size, app.id)
            except BaseException:
                await self._release(app.id, write)
                raise
            if size >= self.limits.max_repo_bytes:
                await self._release(app.id, write)
                raise FailedPrecondition(
                    f"the app's repository is at its size cap ({self.limits.max_repo_bytes} "
                    "bytes): pushes are refused",
                    hint="ask the operator to raise APPDECK_HOSTED_MAX_REPO_BYTES",
                )
        try:
            return await self.hosted.serve(app.id, cgi, write=write)
        except BaseException:
            await self._release(app.id, write)
            raise

    async def _take_slot(self, app_id: int) -> None:
        """One of the app's ``max_pushes_per_app`` push slots (on every replica with
        :attr:`leases`, else on this one), or :class:`PushBusy`."""
        busy = PushBusy("another push to this app is under way", hint="push again in a moment")
        if self._pushing.get(app_id, 0) >= self.limits.max_pushes_per_app:
            raise busy
        if self.leases is not None:
            lease = None
            try:
                for slot in range(self.limits.max_pushes_per_app):
                    lease = await self.leases.acquire(f"push:{app_id}:{slot}")
                    if lease is not None:
                        break
            except Exception:  # Redis away: this replica's own limit still holds
                log.warning(
                    "push leases unreachable: app %s limited on this replica", app_id, exc_info=True
                )
            else:
                if lease is None:
                    raise busy
                self._held.setdefault(app_id, []).append(lease)
        self._pushing[app_id] = self._pushing.get(app_id, 0) + 1

    async def done(self, app: AppRecord, *, write: bool, ok: bool) -> PushOutcome | None:
        """After a request: a push that went through and moved the connected branch is a
        push event (:meth:`pushed`)."""
        await self._release(app.id, write)
        if not (write and ok):
            return None
        try:
            return await self.pushed(app)
        except Exception:  # the push is in; what follows it is logged, not the client's
            log.exception("the push to app %s was taken but not acted on", app.id)
            return None

    async def _release(self, app_id: int, write: bool) -> None:
        if not write:
            return
        left = self._pushing.get(app_id, 1) - 1
        if left > 0:
            self._pushing[app_id] = left
        else:
            self._pushing.pop(app_id, None)
        held = self._held.get(app_id)
        if held:
            lease = held.pop()
            if not held:
                del self._held[app_id]
            if self.leases is not None:
                try:
                    await self.leases.release(lease)
                except Exception:  # it runs out by itself
                    log.warning("the push lease of app %s was not released", app_id, exc_info=True)

    async def pushed(self, app: AppRecord) -> PushOutcome | None:
        """The connected branch's head, read in the sandbox: a new one is received as a
        ``push`` (CI, then ``auto_deploy``); None when the app is not connected to its hosted
        repository, or the branch did not move."""
        record = await self._repos.connection(app.id)
        if record is None or record.url != urls.HOSTED:
            return None
        remote = Remote(str(self.hosted.path(app.id)))
        heads = await self._git.heads(remote, app.id)
        head = heads.branches.get(record.branch)
        if head is None or head == record.last_commit:
            return None
        try:
            found = await self._git.resolve(app.id, remote, record.branch, None)
        except GitError as exc:
            log.warning("app %s: the pushed head could not be read: %s", app.id, exc.reason)
            return None
        return await self._repos.received(app, record, found.sha, found.message, "push")

    # -- inline files -------------------------------------------------------------------------

    async def commit_files(
        self, principal: Principal, app_id: int, files: Sequence[inline.InlineFile]
    ) -> Committed:
        """Commit ``files`` to the app's hosted repository as ``principal`` (files not
        listed keep their content; ``content: None`` deletes a path). An app connected to no
        repository is connected to its hosted one first; one connected elsewhere is refused."""
        view = await self._apps.load(principal, app_id, "deploy.write")
        changes = inline.checked(files, self.inline_limits)
        record = await self._repos.connection(app_id)
        connected = False
        if record is None:
            # the agent sends code to deploy it: a later git push to this remote deploys too
            await self._repos.connect(principal, app_id, urls.HOSTED, auto_deploy=True)
            record = await self._repos.connection(app_id)
            connected = True
        if record is None or record.url != urls.HOSTED:
            shown = record.url if record is not None else "nothing"
            raise FailedPrecondition(
                f"app {app_id} deploys from {shown}: inline files go to its hosted repository",
                hint="connect_repo with url 'hosted' first (or push to that repository)",
            )
        message = f"{len(changes)} inline file(s) by {principal.user}"
        author = inline.Author(principal.user, f"{principal.user}@{principal.tenant}")
        header = inline.header(record.branch, author, message)
        sha = await self.hosted.commit(
            app_id, record.branch, header, inline.changes_stream(changes)
        )
        changed = sha != record.last_commit
        if changed:
            await self._repos.note_commit(view.app, sha, message)
        return Committed(sha, record.branch, changed, connected)
