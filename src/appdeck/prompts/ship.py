"""ship_directory: a directory on the agent's machine to a live URL, by inline files (no git
needed) or a git push to the app's hosted repository; then preflight, a deploy run as a task,
and the URL checked. Filled from the platform: whether the app exists and is live, its push
URL, and this server's caps on inline files."""

from __future__ import annotations

from typing import Any

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.common.identity import Principal
from appdeck.platform.apps import APP_NAME, AppView
from appdeck.platform.repos.urls import HOSTED
from appdeck.platform.services import Platform
from appdeck.prompts.arguments import APP_ID, AS_TASK, STRATEGIES, call, choice, text, workflow
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import PromptArgument, PromptDef, Registry

JsonObject = dict[str, Any]

METHODS = ("files", "git")
MAX_DIRECTORY = 1024
LEFT_OUT = (
    ".git, node_modules, virtualenvs (.venv, venv), __pycache__, build output and secrets "
    "(.env files: set their values with env_vars instead)"
)


def _name(args: dict[str, str]) -> str:
    name = args.get("name", "")
    if not APP_NAME.fullmatch(name):
        raise InvalidArgument(
            "name must be an app name: lowercase letters, digits and dashes, at most 40",
            field="name",
        )
    return name


async def _existing(platform: Platform, principal: Principal, name: str) -> AppView | None:
    """The caller's app of that name, if it exists and the caller sees it."""
    found = await platform.apps.list_apps(principal, offset=0, limit=100, name_contains=name)
    return next((v for v in found if v.app.name == name), None)


def _deploy_extra(strategy: str | None) -> dict[str, str]:
    return {"strategy": strategy} if strategy else {}


def _by_files(
    platform: Platform, name: str, directory: str, app: AppView | None, strategy: str | None
) -> list[str]:
    hosting = platform.hosting
    assert hosting is not None
    caps = hosting.inline_limits
    files = [{"path": "app.py", "content": "<the file's text>"}]
    gather = (
        f"Collect the files of {directory}, leaving out {LEFT_OUT}. Each file is one entry "
        'of files: "path" (relative, with /) and "content" (its text); a binary file adds '
        '"encoding": "base64" with its bytes in base64 as content. At most '
        f"{caps.max_files} files and {caps.max_bytes // (1 << 20)} MiB in one call: a larger "
        "tree goes by git push (method git)."
    )
    if app is None:
        send = (
            f"Send them and deploy, {AS_TASK}: "
            + call("import_and_deploy", name=name, files=files, **_deploy_extra(strategy))
            + ". It registers the app, commits the files to its hosted repository (by you), "
            "detects the runtime and writes the spec, runs preflight and deploys; its result "
            "carries app_id, url and push_url."
        )
    else:
        send = (
            f"Send them and deploy, {AS_TASK}: "
            + call("deploy_app", app_id=app.app.id, files=files, **_deploy_extra(strategy))
            + ". Only the files that changed are needed (files not listed keep their content; "
            '"content": null deletes a path); they are committed, then that commit deploys.'
        )
    return [gather, send]


def _by_git(
    platform: Platform,
    principal: Principal,
    name: str,
    directory: str,
    app: AppView | None,
    strategy: str | None,
) -> list[str]:
    hosting = platform.hosting
    assert hosting is not None
    push_url = hosting.push_url(principal.tenant, name)
    steps = []
    app_id: Any = app.app.id if app else APP_ID
    if app is None:
        steps.append(call("register_app", name=name) + ": its result carries app_id.")
    steps += [
        call("connect_repo", action="connect", app_id=app_id, url="hosted")
        + f": the app's own git remote on this server, push_url {push_url} (branch main).",
        f"In {directory} (git init and a first commit if it is no repository yet; leave out "
        f"{LEFT_OUT} with .gitignore): git push {push_url} HEAD:main. HTTP Basic: any user "
        "name, the password an AppDeck token with repos:write (your OAuth access token, or "
        "appdeck token create --scope repos:write).",
        f"Deploy the pushed head, {AS_TASK}: "
        + call("import_and_deploy", name=name, url="hosted", **_deploy_extra(strategy))
        + ": it detects the runtime if the spec does not say how to run the app, runs "
        "preflight and deploys. Then "
        + call("connect_repo", action="connect", app_id=app_id, url="hosted", auto_deploy=True)
        + " makes each later push deploy itself.",
    ]
    return steps


def _common(strategy: str | None) -> list[str]:
    redeploy = call("deploy_app", app_id=APP_ID, **_deploy_extra(strategy))
    return [
        call("preflight_check", app_id=APP_ID)
        + ": when the deploy stopped at preflight, fix each fail (set_app_spec for run_command, "
        "port, health_check; env_vars for the variables the app needs), call preflight_check "
        f"again until nothing fails, then {redeploy} {AS_TASK}.",
        call("get_app_url", app_id=APP_ID)
        + " and request the URL: it must answer (404: nothing is live yet; 503: the live "
        "release is down). If the deploy failed or was rolled back, tail_deploy_logs (kind "
        "build, then runtime) shows why: fix, then send the files or push again.",
    ]


def register(registry: Registry, platform: Platform) -> None:
    async def ship(args: dict[str, str], ctx: ToolContext) -> JsonObject:
        name = _name(args)
        directory = text(args, "directory", limit=MAX_DIRECTORY, default=".")
        method = choice(args, "method", METHODS, "files")
        strategy = choice(args, "strategy", STRATEGIES, None)
        if platform.hosting is None:
            raise FailedPrecondition(
                "this server has hosted repositories off: no inline files, no git push to it",
                hint="connect_repo a repository URL, then deploy_app (deploy_app_safely)",
            )
        app = await _existing(platform, ctx.principal, name)
        repo = await platform.repos.connection(app.app.id) if app else None
        if repo is not None and repo.url != HOSTED:
            raise FailedPrecondition(
                f"{name} deploys from {repo.url}: files and pushes go to its hosted repository",
                hint="deploy_app_safely for that repository, or connect_repo to change it",
            )
        live = await platform.deployments.live(ctx.principal, app.app.id) if app else None
        if app is None:
            now = f"{name} does not exist yet: this registers it (you become its owner)."
        else:
            shown = f"deployment #{live.record.number} is live" if live else "nothing is live"
            now = f"{name} exists (app_id {app.app.id}, {app.url}): {shown}."
        if method == "files":
            steps = _by_files(platform, name, directory, app, strategy)
        else:
            steps = _by_git(platform, ctx.principal, name, directory, app, strategy)
        steps += _common(strategy)
        legend = f" ({APP_ID}: the app's id, in the first result)" if app is None else ""
        how = "inline files (no git needed)" if method == "files" else "git push"
        head = (
            f"Ship the directory {directory} as the app {name}, by {how}, and check that its "
            f"URL answers.\nNow: {now}{legend}"
        )
        if app is not None:
            steps = [s.replace(APP_ID, str(app.app.id)) for s in steps]
        return workflow(f"Ship {directory} as {name}", head, steps)

    registry.add_prompt(
        PromptDef(
            "ship_directory",
            ship,
            title="Ship this directory",
            description="A directory of your machine to a live URL: inline files or git push, "
            "preflight, a deploy run as a task, the URL checked.",
            arguments=[
                PromptArgument("name", "The app's name (made if it does not exist)", required=True),
                PromptArgument("directory", "The directory to ship (default: .)"),
                PromptArgument("method", "files (default: no git needed) or git (push)"),
                PromptArgument("strategy", "recreate, rolling, blue_green or canary"),
            ],
            scope="repos:write",
        )
    )
