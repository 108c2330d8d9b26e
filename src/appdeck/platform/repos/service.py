"""RepoService: connect an app to a git repository, read and drop the connection, list its
branches, take GitHub push webhooks, and check out a commit as a deployment's source.

The rules: connecting needs ``repo.connect`` (developer); the URL must pass :mod:`.urls` and,
for a local repository, the tenant's source roots (checked again at every fetch); ``git
ls-remote`` must answer, and the branch (the remote's default one unless named) must exist.
The token and the webhook secret are sealed at rest; the token is never returned or logged,
the secret is returned once, by the connect that made it. A push deploys as the user who
connected the repository (their role is checked then, as for any deploy).

What a received commit does (CI tests it, or it is deployed, or only recorded) is the
``on_commit`` port's answer (:class:`CommitPolicy`, the platform's push policy, built after
CI and the deployments): this service records the commit, tells the change feed
(``commit.received``, for observers) and returns the policy's :class:`PushOutcome` as the
webhook's answer. The reads other services need of a connection are
:class:`.sources.RepoSources`, built first and shared.

A webhook delivery is taken once: its body (SHA-256) and its ``X-GitHub-Delivery`` id are
remembered in the database for ``replay_window_s`` (every replica sees them); a delivery seen
before, byte for byte or by id, is answered ``duplicate`` and does nothing. And a push acts
only when its commit is the branch's current head on the remote (``git ls-remote`` when the
delivery comes): a late or replayed push of an older commit is ``ignored``, so it never moves
the deployed commit back, while a branch really moved back (a force push) is followed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Final, Protocol

from appdeck.common.errors import AppDeckError, FailedPrecondition, InvalidArgument, NotFound
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.repos import urls, webhook
from appdeck.platform.repos.git import BRANCH, Git, GitError
from appdeck.platform.repos.github import GitHub, GitHubRepo, github_repository
from appdeck.platform.repos.hosted import HostedRepos
from appdeck.platform.repos.poller import POLL_MAX_S, POLL_MIN_S, Poller
from appdeck.platform.repos.sources import RepoSources, failed, log_output
from appdeck.storage.apps import AppRecord
from appdeck.storage.repos import RepoRecord, RepoStore
from appdeck.storage.webhook_deliveries import MAX_DELIVERY_ID, WebhookDeliveries

log = logging.getLogger("appdeck.repos")


@dataclass(frozen=True, slots=True)
class Received:
    """A new commit on an app's connected branch (a webhook push, a poll, or a CI trigger)."""

    app: AppRecord
    by: Principal
    """The user who connected the repository: deploys and CI runs act as them."""
    commit: str
    message: str
    branch: str
    trigger: str  # push | poll
    auto_deploy: bool
    """The connection's own auto_deploy (a CI configuration takes over when there is one)."""


_DUMMY_SECRET: Final = secrets.token_urlsafe(32)
REPLAY_WINDOW_S: Final = 3 * 86_400
"""How long a delivery is remembered (GitHub redelivers a delivery of the last 3 days)."""


@dataclass(frozen=True, slots=True)
class RepoView:
    app_id: int
    url: str
    branch: str
    auto_deploy: bool
    has_token: bool
    last_commit: str | None
    last_message: str | None
    last_push_at: float | None
    connected_by: str
    updated_at: float
    poll_seconds: int | None
    polled_at: float | None

    @property
    def webhook_path(self) -> str:
        return f"/hooks/git/{self.app_id}"


@dataclass(frozen=True, slots=True)
class Connected:
    repo: RepoView
    webhook_secret: str
    """Shown once: GitHub's webhook secret for ``repo.webhook_path``."""
    head: str
    """The branch's commit when it was connected."""


@dataclass(frozen=True, slots=True)
class Branch:
    name: str
    commit: str
    default: bool


@dataclass(frozen=True, slots=True)
class PushOutcome:
    status: str  # pong | duplicate | ignored | recorded | deploying | testing (a CI run)
    commit: str | None = None
    reason: str = ""


class WebhookRefused(Exception):
    """The delivery is not signed by the app's secret (or no such connection: not said)."""


class CommitPolicy(Protocol):
    """What a received commit does (``appdeck.platform.pushes.PushPolicy``): its answer is
    the webhook's (or the poll's) outcome; work it starts in the background is awaited by
    :meth:`settle`."""

    async def __call__(self, got: Received) -> PushOutcome: ...

    async def settle(self) -> None: ...


class RepoService:
    def __init__(
        self,
        apps: AppService,
        sources: RepoSources,
        sealer: Sealer,
        feed: ChangeFeed,
        *,
        on_commit: CommitPolicy,
        deliveries: WebhookDeliveries,
        replay_window_s: float = REPLAY_WINDOW_S,
    ) -> None:
        self._apps = apps
        self.sources = sources
        """The connection's reads, shared with the deploy engine, preflight and CI."""
        self._deliveries = deliveries
        self._replay_window_s = replay_window_s
        self._sealer = sealer
        self._feed = feed
        self._on_commit = on_commit
        self.poller = Poller(self, sources.store)
        """Polls the connections with ``poll_seconds`` (started by ``Platform.start``)."""

    @property
    def _store(self) -> RepoStore:
        return self.sources.store

    @property
    def _git(self) -> Git:
        return self.sources.git

    @property
    def hosted(self) -> HostedRepos | None:
        """The apps' hosted repositories (url ``hosted``: :mod:`.hosting`); None: off."""
        return self.sources.hosted

    @property
    def github(self) -> GitHub:
        """The GitHub adapter (statuses, a token's repositories): :class:`RepoSources`'s."""
        return self.sources.github

    # -- the connection -------------------------------------------------------------------

    async def connect(
        self,
        principal: Principal,
        app_id: int,
        url: str,
        *,
        token: str | None = None,
        branch: str | None = None,
        auto_deploy: bool = False,
        poll_seconds: int | None = None,
    ) -> Connected:
        view = await self._apps.load(principal, app_id, "repo.connect")
        _check_poll(poll_seconds)
        parsed = urls.parse(url)
        if token is not None:
            urls.check_token(token)
            if parsed.kind != "https":
                raise InvalidArgument("a token is sent over https only; the url is not https")
        if branch is not None and not BRANCH.fullmatch(branch):
            raise InvalidArgument(f"branch {branch[:100]!r} is not a valid branch name")
        remote = self.sources.remote(view.app, parsed, token)
        if parsed.kind == "hosted" and self.hosted is not None:
            await self.hosted.ensure(app_id)
        try:
            heads = await self._git.heads(remote, app_id)
        except GitError as exc:
            raise failed(app_id, exc, "the repository could not be read") from None
        if not heads.branches and parsed.kind != "hosted":
            raise FailedPrecondition("the repository has no branch", hint="push a commit first")
        fallback = next(iter(sorted(heads.branches)), "main")  # an empty hosted repo: main
        chosen = branch or heads.default or fallback
        if heads.branches and chosen not in heads.branches:
            shown = ", ".join(sorted(heads.branches)[:10])
            raise InvalidArgument(f"branch {chosen!r} is not in the repository", hint=shown)
        secret = secrets.token_urlsafe(32)
        await asyncio.to_thread(self._git.forget, app_id)  # another url's objects go
        record = await self._store.put(
            app_id=app_id,
            url=parsed.url,
            token=self._sealer.seal(token) if token is not None else None,
            branch=chosen,
            webhook_secret=self._sealer.seal(secret),
            auto_deploy=auto_deploy,
            connected_by=principal.user,
            poll_seconds=poll_seconds,
            head=heads.branches.get(chosen),
        )
        await self._feed.emit(Change("app.updated", view.app.tenant_id, app_id))
        return Connected(_view(record), secret, heads.branches.get(chosen, ""))

    async def set_polling(
        self, principal: Principal, app_id: int, poll_seconds: int | None
    ) -> RepoView:
        """Poll the branch every ``poll_seconds`` (``None``: stop polling)."""
        view = await self._apps.load(principal, app_id, "repo.connect")
        _check_poll(poll_seconds)
        await self._connection(app_id)
        record = await self._store.set_polling(app_id, poll_seconds)
        if record is None:
            raise NotFound(f"app {app_id} has no repository", hint="connect_repo connects one")
        await self._feed.emit(Change("app.updated", view.app.tenant_id, app_id))
        return _view(record)

    async def get(self, principal: Principal, app_id: int) -> RepoView:
        await self._apps.load(principal, app_id, "app.read")
        return _view(await self._connection(app_id))

    async def disconnect(self, principal: Principal, app_id: int) -> bool:
        view = await self._apps.load(principal, app_id, "repo.connect")
        done = await self._store.delete(app_id)
        await self.forget(app_id)
        if done:
            await self._feed.emit(Change("app.updated", view.app.tenant_id, app_id))
        return done

    async def branches(
        self, principal: Principal, app_id: int, *, offset: int = 0, limit: int = 100
    ) -> list[Branch]:
        view = await self._apps.load(principal, app_id, "repo.connect")
        record = await self._connection(app_id)
        try:
            heads = await self._git.heads(self.sources.stored_remote(view.app, record), app_id)
        except GitError as exc:
            raise failed(app_id, exc, "the repository could not be read") from None
        found = [Branch(n, s, n == heads.default) for n, s in sorted(heads.branches.items())]
        return found[offset : offset + limit]

    async def forget(self, app_id: int) -> None:
        """Drop the app's fetched objects and checkouts (disconnect, app delete)."""
        await asyncio.to_thread(self._git.forget, app_id)

    async def _connection(self, app_id: int) -> RepoRecord:
        record = await self._store.get(app_id)
        if record is None:
            raise NotFound(f"app {app_id} has no repository", hint="connect_repo connects one")
        return record

    # -- the reads other services make (:class:`RepoSources`'s, for this service's callers) --

    async def connected(self, app_id: int) -> bool:
        return await self.sources.connected(app_id)

    async def url(self, app_id: int) -> str | None:
        """The connected repository's URL (never with credentials), if any."""
        return await self.sources.url(app_id)

    async def connection(self, app_id: int) -> RepoRecord | None:
        """The app's connection as stored (sealed token and secret: never shown as is)."""
        return await self.sources.connection(app_id)

    async def source(self, app: AppRecord, commit: str | None) -> dict[str, Any] | None:
        """The app's repository checked out at ``commit`` (:meth:`RepoSources.source`)."""
        return await self.sources.source(app, commit)

    async def report_status(
        self,
        app_id: int,
        sha: str,
        state: str,
        context: str,
        description: str,
        target_url: str | None = None,
    ) -> bool:
        """A GitHub commit status (:meth:`RepoSources.report_status`)."""
        return await self.sources.report_status(
            app_id, sha, state, context, description, target_url
        )

    async def note_commit(self, app: AppRecord, commit: str, message: str) -> None:
        """Record a commit the platform made on the connected branch (inline files): a
        later push or poll compares with it."""
        await self._store.pushed(app.id, commit, message)
        await self._feed.emit(Change("app.updated", app.tenant_id, app.id))

    # -- GitHub's extras (:mod:`.github`) ------------------------------------------------

    async def token_repos(self, principal: Principal, app_id: int) -> list[GitHubRepo]:
        """The GitHub repositories the app's connected token can see."""
        await self._apps.load(principal, app_id, "repo.connect")
        record = await self._connection(app_id)
        if record.token is None or github_repository(record.url) is None:
            raise FailedPrecondition(
                "the app's repository is not a github.com https URL with a token",
                hint="connect_repo with a https://github.com/<owner>/<repo> url and a token",
            )
        return await self.github.repos(self._sealer.open(record.token))

    # -- polling (the schedule is :mod:`.poller`'s) ---------------------------------------

    async def poll(self, record: RepoRecord) -> str:
        """One poll of a connection: ``ls-remote``; a head other than ``last_commit`` is
        fetched (for its message) and :meth:`received` as a ``poll``. What happened:
        ``unchanged``, ``baseline`` (nothing recorded yet: the head is taken as the start),
        ``gone``, ``superseded`` (a webhook push recorded another commit meanwhile) or the
        outcome's status. :class:`GitError` / :class:`AppDeckError` on failure."""
        app = await self._apps.store.get(record.app_id)
        if app is None:
            return "gone"
        remote = self.sources.stored_remote(app, record)
        head = (await self._git.heads(remote, app.id)).branches.get(record.branch)
        if head is None:
            raise GitError(f"the branch {record.branch!r} is gone from the repository")
        if record.last_commit is None:
            await self._store.baseline(record.app_id, head)
            return "baseline"
        if head == record.last_commit:
            return "unchanged"
        try:
            found = await self._git.resolve(app.id, remote, record.branch, None)
        except GitError as exc:
            log_output(app.id, exc)
            raise
        current = await self._store.get(record.app_id)
        if current is None or current.url != record.url or current.branch != record.branch:
            return "gone"  # disconnected or reconnected meanwhile
        if current.last_commit != record.last_commit:
            return "superseded"  # a push took a newer head meanwhile: never go back to ours
        outcome = await self.received(app, current, found.sha, found.message, "poll")
        return outcome.status

    # -- the webhook --------------------------------------------------------------------

    async def push(
        self,
        app_id: int,
        body: bytes,
        signature: str | None,
        event: str | None,
        *,
        delivery: str | None = None,
    ) -> PushOutcome:
        """A webhook delivery: :class:`WebhookRefused` unless signed by the app's secret;
        ``duplicate`` when it was taken before (``delivery``: its ``X-GitHub-Delivery``)."""
        record = await self._store.get(app_id)
        secret = self._sealer.open(record.webhook_secret) if record else _DUMMY_SECRET
        good = webhook.signed(secret, body, signature)  # computed either way: same timing
        if record is None or not good:
            raise WebhookRefused
        digest = hashlib.sha256(body).hexdigest()
        if not delivery or not delivery.isprintable() or len(delivery) > MAX_DELIVERY_ID:
            delivery = None  # not GitHub's GUID: the body alone names the delivery
        if not await self._deliveries.first(
            app_id, digest, delivery, window_s=self._replay_window_s
        ):
            return PushOutcome(
                "duplicate", reason="this delivery was received before: nothing done"
            )
        try:
            return await self._take(app_id, record, body, event, digest)
        except Exception:  # it did not go through: a redelivery of it may be taken
            await self._deliveries.forget(app_id, digest)
            raise

    async def _take(
        self, app_id: int, record: RepoRecord, body: bytes, event: str | None, digest: str
    ) -> PushOutcome:
        """A delivery taken for the first time: what it asks for, if anything."""
        if event == "ping":
            return PushOutcome("pong")
        if event not in (None, "push"):
            return PushOutcome("ignored", reason=f"event {event[:40]!r} is not a push")
        push = webhook.parse_push(body)
        if push is None:
            return PushOutcome("ignored", reason="not a push payload")
        if push.branch != record.branch:
            return PushOutcome("ignored", reason=f"not the connected branch {record.branch}")
        if push.commit is None:
            return PushOutcome("ignored", reason="the branch was deleted")
        app = await self._apps.store.get(app_id)
        if app is None:
            raise WebhookRefused
        stale = await self._not_head(app, record, push.commit, digest)
        if stale is not None:
            return stale
        return await self.received(app, record, push.commit, push.message, "push")

    async def _not_head(
        self, app: AppRecord, record: RepoRecord, commit: str, digest: str
    ) -> PushOutcome | None:
        """``ignored`` unless ``commit`` is the branch's head on the remote now: a push
        delivered late, or replayed after the window, never moves the app back."""
        try:
            heads = await self._git.heads(self.sources.stored_remote(app, record))
        except (GitError, AppDeckError) as exc:
            await self._deliveries.forget(app.id, digest)  # a redelivery may be taken
            reason = exc.reason if isinstance(exc, GitError) else exc.message
            log.warning("a push to app %s was not taken: no head read: %s", app.id, reason[:300])
            return PushOutcome(
                "ignored",
                commit,
                "the branch's current head could not be read from the repository: nothing "
                "done (redeliver the webhook, or the next push or poll takes it)",
            )
        head = heads.branches.get(record.branch)
        if head != commit:
            return PushOutcome(
                "ignored",
                commit,
                f"not the branch's current head ({(head or 'none')[:12]}): an older or "
                "out-of-order push is not deployed",
            )
        return None

    async def received(
        self, app: AppRecord, record: RepoRecord, commit: str, message: str, trigger: str
    ) -> PushOutcome:
        """A new commit on the connected branch, from a verified webhook, a poll or a ``git
        push``: recorded, told to the change feed's observers, then what the push policy
        (``on_commit``) answers: CI tests it, or it is deployed, or it stays recorded."""
        await self._store.pushed(app.id, commit, message)
        await self._feed.emit(Change("app.updated", app.tenant_id, app.id))
        await self._feed.emit(Change("commit.received", app.tenant_id, app.id, commit=commit))
        by = Principal(tenant=app.tenant_id, user=record.connected_by, kind="pat")
        got = Received(app, by, commit, message, record.branch, trigger, record.auto_deploy)
        return await self._on_commit(got)

    async def settle(self) -> None:
        """Wait for push deploys under way (tests, shutdown)."""
        await self._on_commit.settle()


def _view(record: RepoRecord) -> RepoView:
    return RepoView(
        app_id=record.app_id,
        url=record.url,
        branch=record.branch,
        auto_deploy=record.auto_deploy,
        has_token=record.token is not None,
        last_commit=record.last_commit,
        last_message=record.last_message,
        last_push_at=record.last_push_at,
        connected_by=record.connected_by,
        updated_at=record.updated_at,
        poll_seconds=record.poll_seconds,
        polled_at=record.polled_at,
    )


def _check_poll(poll_seconds: int | None) -> None:
    if poll_seconds is not None and not POLL_MIN_S <= poll_seconds <= POLL_MAX_S:
        raise InvalidArgument(
            f"poll_seconds must be between {POLL_MIN_S} and {POLL_MAX_S} (or null: no polling)",
            hint="a push webhook is immediate; polling is for when none can be added",
        )
