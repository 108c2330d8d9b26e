"""ImportService: from a repository URL to a live app in one call (import_and_deploy).

The steps, each reported as it goes: 1 register the app (or reuse the caller's app of that
name), 2 connect the repository (or reuse the connection to the same URL), 3 check out the
branch head, 4 detect the runtime and write the spec (a spec that already has a run command
is kept), 5 preflight, 6 deploy the head (unless it is already live). Idempotent on retry: the
same arguments end at the same app and connection (no new webhook secret) and never deploy a
commit that is already live. An app of that name connected to another repository is a
conflict, never silently repointed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from appdeck.common.errors import Conflict, FailedPrecondition, InvalidArgument, NotFound
from appdeck.common.identity import Principal
from appdeck.platform.apps import APP_NAME, AppService, AppView
from appdeck.platform.deploy.deployments import Deployments, DeploymentView
from appdeck.platform.deploy.preflight import PreflightService
from appdeck.platform.imports.detect import detect
from appdeck.platform.repos import inline
from appdeck.platform.repos.hosting import HostedService
from appdeck.platform.repos.service import RepoService
from appdeck.platform.repos.urls import HOSTED

STEPS: Final = 6
Report = Callable[[str, int], Awaitable[None]]


async def _quiet(message: str, step: int) -> None:
    return None


@dataclass
class Imported:
    app: AppView
    steps: list[tuple[str, str]] = field(default_factory=list)
    """(step, what happened) in order."""
    webhook_secret: str | None = None
    """Only when this call made the connection (shown once)."""
    webhook_path: str = ""
    commit: str = ""
    detected: dict[str, object] = field(default_factory=dict)
    deployment: DeploymentView | None = None
    already_live: bool = False


def app_name_from(url: str) -> str:
    """An app name from the repository's last path segment (``octo/My_Shop.git`` → ``my-shop``)."""
    last = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git").lower()
    name = re.sub(r"[^a-z0-9]+", "-", last).strip("-")[:40].strip("-")
    return name if APP_NAME.fullmatch(name) else "app"


class ImportService:
    def __init__(
        self,
        apps: AppService,
        repos: RepoService,
        preflight: PreflightService,
        deployments: Deployments,
        hosting: HostedService | None = None,
    ) -> None:
        self._apps = apps
        self._hosting = hosting
        self._repos = repos
        self._preflight = preflight
        self._deployments = deployments

    async def run(
        self,
        principal: Principal,
        url: str,
        *,
        token: str | None = None,
        name: str | None = None,
        branch: str | None = None,
        strategy: str | None = None,
        wait_s: float | None = None,
        report: Report = _quiet,
        files: list[inline.InlineFile] | None = None,
    ) -> Imported:
        """``files``: committed to the app's hosted repository (``url`` must then be
        ``hosted``), whose head is then deployed."""
        if files is not None and (url != HOSTED or self._hosting is None):
            raise FailedPrecondition("inline files go to the app's hosted repository only")
        name = name or app_name_from(url)
        await report(f"Registering app {name}", 1)
        view, created = await self._app(principal, name)
        done = Imported(view)
        done.steps.append(("app", f"{'created' if created else 'reused'} app {name}"))
        await report("Connecting the repository", 2)
        await self._connect(principal, done, url, token, branch)
        if files is not None and self._hosting is not None:
            made = await self._hosting.commit_files(principal, view.app.id, files)
            said = "committed" if made.changed else "unchanged (same files as the head)"
            done.steps.append(("files", f"{len(files)} file(s) {said}: {made.sha[:12]}"))
        await report("Checking out the branch head", 3)
        source = await self._repos.source(view.app, None)
        if source is None:  # disconnected in between
            raise FailedPrecondition("the repository was disconnected", hint="retry")
        done.commit = str(source["commit"])
        done.steps.append(("checkout", f"{source['branch']} at {done.commit[:12]}"))
        await report("Detecting the runtime", 4)
        await self._spec(principal, done, Path(str(source["path"])))
        await report("Preflight", 5)
        checked = await self._preflight.check(principal, view.app.id)
        failing = [c for c in checked.checks if c.status == "fail"]
        if failing:
            said = "; ".join(f"{c.name}: {c.detail}" for c in failing)
            raise FailedPrecondition(f"preflight failed: {said}", hint=failing[0].hint)
        done.steps.append(("preflight", checked.verdict))
        await report(f"Deploying {done.commit[:12]}", 6)
        await self._deploy(principal, done, strategy, wait_s)
        return done

    async def _app(self, principal: Principal, name: str) -> tuple[AppView, bool]:
        if not APP_NAME.fullmatch(name):
            raise InvalidArgument(
                f"{name[:60]!r} is not a valid app name",
                hint="lowercase letters, digits and dashes, at most 40",
                field="name",
            )
        existing = await self._apps.store.by_name(principal.tenant, name)
        if existing is None:
            return await self._apps.register(principal, name), True
        try:
            return await self._apps.load(principal, existing.id, "deploy.write"), False
        except NotFound:
            raise Conflict(
                f"an app named {name} already exists in your tenant",
                hint="pass another name",
            ) from None

    async def _connect(
        self,
        principal: Principal,
        done: Imported,
        url: str,
        token: str | None,
        branch: str | None,
    ) -> None:
        app = done.app.app
        record = await self._repos.connection(app.id)
        if record is not None:
            if record.url != url or (branch is not None and branch != record.branch):
                raise Conflict(
                    f"app {app.name} is connected to {record.url} ({record.branch})",
                    hint="pass another name, or connect_repo to change its repository",
                )
            done.webhook_path = f"/hooks/git/{app.id}"
            done.steps.append(("repository", f"reused the connection ({record.branch})"))
            return
        # the hosted remote takes the agent's own pushes: each deploys, as the import did (a
        # webhook or poll of another repository stays a choice: connect_repo auto_deploy)
        made = await self._repos.connect(
            principal, app.id, url, token=token, branch=branch, auto_deploy=url == HOSTED
        )
        done.webhook_secret = made.webhook_secret
        done.webhook_path = made.repo.webhook_path
        done.steps.append(("repository", f"connected ({made.repo.branch})"))

    async def _spec(self, principal: Principal, done: Imported, checkout: Path) -> None:
        spec = done.app.app.spec
        if spec.get("run_command") or spec.get("runtime") == "static":
            done.steps.append(("spec", "kept: the app's spec already says how to run it"))
            return
        found = await asyncio.to_thread(detect, checkout)
        done.detected = {**found.spec(), "reasons": list(found.reasons)}
        view, _ = await self._apps.set_spec(principal, done.app.app.id, found.spec())
        done.app = view
        done.steps.append(("spec", f"{found.runtime} ({'; '.join(found.reasons)})"))

    async def _deploy(
        self, principal: Principal, done: Imported, strategy: str | None, wait_s: float | None
    ) -> None:
        app_id = done.app.app.id
        live = await self._deployments.live(principal, app_id)
        if live is not None and live.record.source.get("commit") == done.commit:
            done.deployment = live
            done.already_live = True
            done.steps.append(("deploy", f"already live at {done.commit[:12]}"))
            return
        view = await self._deployments.deploy(
            principal, app_id, strategy, wait_s=wait_s, commit=done.commit
        )
        done.deployment = view
        done.steps.append(("deploy", f"deployment #{view.record.number}: {view.record.state}"))
