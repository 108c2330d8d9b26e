"""import_and_deploy: from a repository URL to a live app, in one task (ImportService)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.platform.deploy import policy
from appdeck.platform.imports.service import STEPS, Imported
from appdeck.platform.repos.urls import HOSTED
from appdeck.tools.deploy import deployment
from appdeck.tools.kit import Arguments, Call, Hints, Output, Reply, Tool
from appdeck.tools.repos import BranchName, Files, Token, Url, inline_files
from appdeck.tools.results import Deployment

import_and_deploy = Tool(
    "import_and_deploy",
    title="Import a repository and deploy it",
    description="From a git repository URL to a live app in one call: register the app (or "
    "reuse yours of that name), connect the repository (same rules as connect_repo), check "
    "out the branch head, detect the runtime (a Procfile web line, package.json, app.py or "
    "main.py with requirements.txt/pyproject.toml, a static index.html) and write the spec "
    "(a spec that already has a run_command is kept), run preflight, deploy. Safe to retry: "
    "the same arguments reuse the app and connection and never redeploy a commit that is "
    "already live. Runs as a task when the call carries task (progress per step); otherwise "
    "waits up to wait_seconds for the deploy. Without git on your side: give name and files "
    "instead of url ([{path, content, encoding}]): they are committed to the app's hosted "
    "repository (by you; files not listed keep their previous content, content null "
    "deletes) and that commit is deployed; the result's push_url takes git push later. "
    "Next: get_app_url, whats_next.",
    scope="repos:write",
    hints=Hints(read_only=False, idempotent=True),
    task_support="optional",
)


class ImportAndDeploy(Arguments):
    url: Url | None = Field(
        default=None, description="The repository (see connect_repo); left out with files."
    )
    token: Token | None = None
    name: (
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=40,
                description="The app's name (default: from the repository's name).",
            ),
        ]
        | None
    ) = None
    branch: BranchName | None = None
    strategy: Literal["recreate", "rolling", "blue_green", "canary"] | None = None
    wait_seconds: float | None = Field(default=None, ge=0, le=policy.MAX_WAIT_S)
    files: Files | None = None


class StepDone(Output):
    step: str
    outcome: str


class ImportResult(Output):
    app_id: int
    name: str
    url: str = Field(description="Where the app is served.")
    commit: str
    steps: list[StepDone]
    detected: dict[str, Any] | None = Field(
        description="The runtime and run command found, and why (null: the spec was kept)."
    )
    webhook_path: str
    webhook_secret: str | None = Field(
        description="Only when this call connected the repository: shown once."
    )
    already_live: bool
    deployment: Deployment | None
    push_url: str | None = Field(
        default=None, description="The app's git remote when it deploys from its hosted one."
    )


@import_and_deploy.handles(ImportAndDeploy, ImportResult)
async def _import(args: ImportAndDeploy, call: Call) -> Reply:
    async def report(message: str, step: int) -> None:
        await call.ctx.report(message, step, STEPS)

    if (args.url is None) == (args.files is None) and args.url != HOSTED:
        raise InvalidArgument("give url (a repository) or files (inline), one of the two")
    if args.files is not None and args.name is None:
        raise InvalidArgument("name is required with files (the app's name)", field="name")
    url = args.url or HOSTED
    done: Imported = await call.platform.imports.run(
        call.principal,
        url,
        token=args.token,
        name=args.name,
        branch=args.branch,
        strategy=args.strategy,
        wait_s=None if call.as_task else policy.wait_seconds(args.wait_seconds),
        report=report,
        files=inline_files(args.files) if args.files is not None else None,
    )
    app = done.app.app
    hosting = call.platform.hosting
    data = ImportResult(
        app_id=app.id,
        name=app.name,
        url=done.app.url,
        commit=done.commit,
        steps=[StepDone(step=s, outcome=o) for s, o in done.steps],
        detected=done.detected or None,
        webhook_path=done.webhook_path,
        webhook_secret=done.webhook_secret,
        already_live=done.already_live,
        deployment=deployment(done.deployment) if done.deployment else None,
    )
    if url == HOSTED and hosting is not None:
        data.push_url = hosting.push_url(app.tenant_id, app.name)
    view = done.deployment
    summary = f"{app.name} ({done.commit[:12]}): " + "; ".join(o for _, o in done.steps)
    if view is None or view.live:
        return Reply(f"{summary}. Live at {done.app.url}", data)
    if not view.done:
        return Reply(f"{summary}. Follow it with list_deployments", data)
    failed = FailedPrecondition(
        view.record.status_message or view.record.state,
        hint="tail_deploy_logs shows the build and runtime logs",
    )
    return Reply(summary, data, error=failed)


TOOLS = (import_and_deploy,)
