"""connect_repo: an app's git repository (RepoService): connect, get, branches, disconnect."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Literal

from pydantic import Field

from appdeck.platform.repos import inline
from appdeck.platform.repos.inline import MAX_PATH
from appdeck.platform.repos.service import Branch, RepoView
from appdeck.platform.repos.urls import HOSTED
from appdeck.tools.kit import AppId, Arguments, Call, Hints, Output, Reply, Tool, paginate

connect_repo = Tool(
    "connect_repo",
    title="Connect a git repository",
    description="Connect an app to a git repository, which then becomes the source of its "
    "deploys (each deployment records the commit sha and message it was built from). url: a "
    "GitHub (or any) https URL, with token for a private repository (stored encrypted, never "
    "shown) on a public address, or a local path / file:// URL under your source roots. The "
    "branch "
    "defaults to the repository's default branch. connect returns webhook_path (on this "
    "server, where /mcp is) and webhook_secret (shown once): add them as a GitHub push "
    "webhook (content type application/json); with auto_deploy: true each push to the "
    "branch is deployed; poll_seconds (or action polling) checks the branch for new commits "
    "instead. url 'hosted' connects the app to its own git repository on this server: "
    "connect returns push_url, where git push (HTTP Basic; the password an AppDeck token with "
    "repos:write) sends commits from your machine, a push to the branch being handled as a "
    "webhook push; deploy_app and import_and_deploy files go there too. "
    "Next: set_app_spec (run_command), then deploy_app.",
    scope="repos:write",
    hints=Hints(read_only=False),
)

Url = Annotated[
    str,
    Field(
        min_length=1,
        max_length=2048,
        description="https://host/owner/repo.git, file:///abs/path or /abs/path (never with "
        "credentials in it: use token; git:// is refused), or 'hosted': the app's own "
        "repository on this server (git push to its push_url).",
    ),
]
Token = Annotated[
    str,
    Field(
        min_length=1,
        max_length=512,
        description="An access token for a private https repository (stored encrypted).",
    ),
]
BranchName = Annotated[
    str, Field(min_length=1, max_length=200, description="A branch of the repository.")
]


PollSeconds = Annotated[
    int,
    Field(
        ge=60,
        le=86_400,
        description="Also poll the branch every so many seconds (60 to 86400) for when no "
        "webhook can be added; a new commit is handled as a push.",
    ),
]


class Connect(Arguments):
    """Connect (or reconnect, with a new webhook secret) the app to a repository. Needs url."""

    action: Literal["connect"]
    app_id: AppId
    url: Url
    token: Token | None = None
    branch: BranchName | None = None
    auto_deploy: bool = Field(default=False, description="Deploy every push to the branch.")
    poll_seconds: PollSeconds | None = None


class Repo(Output):
    app_id: int
    url: str
    branch: str
    auto_deploy: bool
    has_token: bool
    webhook_path: str
    last_commit: str | None
    last_message: str | None
    last_push_at: float | None
    connected_by: str
    updated_at: float
    poll_seconds: int | None = Field(description="Polling every so many seconds (null: off).")
    polled_at: float | None
    push_url: str | None = Field(
        default=None,
        description="url 'hosted' only: the app's git remote (git push <push_url> <branch>; "
        "user name anything, password an AppDeck token with repos:write).",
    )


class Connected(Output):
    app_id: int
    repo: Repo
    head: str = Field(description="The branch's commit now.")
    webhook_path: str = Field(
        description="The webhook's path on this server (its base URL is the one /mcp is on)."
    )
    webhook_secret: str = Field(description="Shown once: GitHub's webhook secret.")


async def _repo(view: RepoView, call: Call) -> Repo:
    hosting = call.platform.hosting
    push_url = None
    if view.url == HOSTED and hosting is not None:
        push_url = await hosting.push_url_of(view.app_id)
    return Repo(**asdict(view), webhook_path=view.webhook_path, push_url=push_url)


class InlineFile(Arguments):
    path: str = Field(
        min_length=1,
        max_length=MAX_PATH,
        description="Relative to the app's root, with / between folders (no .., no .git).",
    )
    content: str | None = Field(
        description="The file's content (a regular file); null deletes the path."
    )
    encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="How content is written: utf-8 text, or base64 bytes."
    )


Files = Annotated[
    list[InlineFile],
    Field(
        min_length=1,
        max_length=100_000,
        description="Files committed to the app's hosted repository (by you) before the "
        "deploy, which then deploys that commit: files not listed keep their content from "
        "the previous commit; content null deletes a path. Capped in count and total size.",
    ),
]


def inline_files(files: list[InlineFile]) -> list[inline.InlineFile]:
    return [inline.InlineFile(f.path, f.content, f.encoding) for f in files]


@connect_repo.handles(Connect, Connected)
async def _connect(args: Connect, call: Call) -> Reply:
    done = await call.platform.repos.connect(
        call.principal,
        args.app_id,
        args.url,
        token=args.token,
        branch=args.branch,
        auto_deploy=args.auto_deploy,
        poll_seconds=args.poll_seconds,
    )
    data = Connected(
        app_id=args.app_id,
        repo=await _repo(done.repo, call),
        head=done.head,
        webhook_path=done.repo.webhook_path,
        webhook_secret=done.webhook_secret,
    )
    pushed = (
        f" Push to it: git push {data.repo.push_url} {done.repo.branch}."
        if (data.repo.push_url)
        else ""
    )
    return Reply(
        f"Connected app {args.app_id} to {done.repo.url} ({done.repo.branch} at "
        f"{done.head[:12] or 'no commit yet'}); the webhook secret is shown only now.{pushed} "
        "Next: deploy_app.",
        data,
    )


class GetRepo(Arguments):
    """The app's repository connection (never its token or webhook secret)."""

    action: Literal["get"]
    app_id: AppId


class RepoResult(Output):
    app_id: int
    repo: Repo


@connect_repo.handles(GetRepo, RepoResult)
async def _get(args: GetRepo, call: Call) -> Reply:
    view = await call.platform.repos.get(call.principal, args.app_id)
    last = f", last push {view.last_commit[:12]}" if view.last_commit else ""
    return Reply(
        f"App {args.app_id} deploys from {view.url} ({view.branch}){last}",
        RepoResult(app_id=args.app_id, repo=await _repo(view, call)),
    )


class ListBranches(Arguments):
    """The repository's branches, with their commits (asks the remote). Paginated."""

    action: Literal["branches"]
    app_id: AppId
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")
    limit: int = Field(default=50, ge=1, le=100)


class BranchInfo(Output):
    name: str
    commit: str
    default: bool


class Branches(Output):
    app_id: int
    branches: list[BranchInfo]
    next_cursor: str | None = Field(default=None, description="Present when there is more.")


@connect_repo.handles(ListBranches, Branches)
async def _branches(args: ListBranches, call: Call) -> Reply:
    async def fetch(offset: int, limit: int) -> list[Branch]:
        return await call.platform.repos.branches(
            call.principal, args.app_id, offset=offset, limit=limit
        )

    page = await paginate(fetch, args.cursor, args.limit)
    data = Branches(
        app_id=args.app_id,
        branches=[BranchInfo(name=b.name, commit=b.commit, default=b.default) for b in page.items],
    )
    if page.next_cursor:
        data.next_cursor = page.next_cursor
    return Reply(f"{len(page.items)} branch(es): {', '.join(b.name for b in page.items)}", data)


class Disconnect(Arguments):
    """Forget the app's repository (its token and webhook secret go with it)."""

    action: Literal["disconnect"]
    app_id: AppId


class Disconnected(Output):
    app_id: int
    disconnected: bool


@connect_repo.handles(Disconnect, Disconnected)
async def _disconnect(args: Disconnect, call: Call) -> Reply:
    done = await call.platform.repos.disconnect(call.principal, args.app_id)
    summary = "Disconnected" if done else "No repository was connected to"
    return Reply(
        f"{summary} app {args.app_id}", Disconnected(app_id=args.app_id, disconnected=done)
    )


class SetPolling(Arguments):
    """Poll the branch every poll_seconds (left out: stop polling)."""

    action: Literal["polling"]
    app_id: AppId
    poll_seconds: PollSeconds | None = None


@connect_repo.handles(SetPolling, RepoResult)
async def _polling(args: SetPolling, call: Call) -> Reply:
    view = await call.platform.repos.set_polling(call.principal, args.app_id, args.poll_seconds)
    every = f"every {view.poll_seconds} s" if view.poll_seconds else "no longer"
    return Reply(
        f"App {args.app_id}'s branch {view.branch} is polled {every}",
        RepoResult(app_id=args.app_id, repo=await _repo(view, call)),
    )


class ListGitHubRepos(Arguments):
    """The GitHub repositories the app's connected token can see (a github.com https
    connection with a token only; at most 1000)."""

    action: Literal["github_repos"]
    app_id: AppId


class GitHubRepoInfo(Output):
    full_name: str
    clone_url: str
    private: bool
    default_branch: str | None


class GitHubRepos(Output):
    app_id: int
    repos: list[GitHubRepoInfo]


@connect_repo.handles(ListGitHubRepos, GitHubRepos)
async def _github_repos(args: ListGitHubRepos, call: Call) -> Reply:
    found = await call.platform.repos.token_repos(call.principal, args.app_id)
    data = GitHubRepos(app_id=args.app_id, repos=[GitHubRepoInfo(**asdict(r)) for r in found])
    return Reply(f"The token sees {len(found)} GitHub repositories", data)


TOOLS = (connect_repo,)
