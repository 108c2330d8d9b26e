"""set_up_ci_and_auto_deploy: an app's tests run at each push to its repository, and each
green commit deploys itself (manage_ci with auto_deploy). Filled from the platform: the app's
repository connection and its CI as they are now."""

from __future__ import annotations

from typing import Any

from appdeck.common.errors import NotFound
from appdeck.platform.ci.service import MAX_COMMAND
from appdeck.platform.repos.urls import HOSTED
from appdeck.platform.services import Platform
from appdeck.prompts.arguments import (
    AS_TASK,
    STRATEGIES,
    app_id,
    call,
    choice,
    flag,
    text,
    workflow,
)
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import PromptArgument, PromptDef, Registry

JsonObject = dict[str, Any]
CHOOSE = "<the command that runs this app's tests>"


def _connection(number: int, repo: Any, push_url: str | None) -> tuple[str, str]:
    """(where the app's repository stands, the step that connects one or shows it)."""
    if repo is not None:
        shown = call("connect_repo", action="get", app_id=number)
        return (
            f"connected to {repo.url} (branch {repo.branch})",
            f"The repository is connected: {shown} shows it.",
        )
    hosted = (
        call("connect_repo", action="connect", app_id=number, url="hosted")
        + f" (the app's own remote on this server: git push to push_url {push_url}, "
        "HTTP Basic, the password an AppDeck token with repos:write), or "
        if push_url
        else ""
    )
    github = call(
        "connect_repo", action="connect", app_id=number, url="https://github.com/<owner>/<repo>.git"
    )
    return "no repository is connected yet", (
        f"Connect a repository: {hosted}"
        + github
        + ' ("token" for a private repository) and add the webhook_path and '
        "webhook_secret it returns as a GitHub push "
        'webhook (content type application/json), or pass "poll_seconds" instead.'
    )


def _ci_now(ci: Any) -> str:
    if ci is None:
        return "not configured"
    return (
        f"runs {ci.test_command[:200]!r}, auto_deploy {'on' if ci.auto_deploy else 'off'}, "
        f"require_green {'on' if ci.require_green else 'off'}"
    )


def _steps(
    number: int, connect: str, command: str, configure: dict[str, Any], push: str
) -> list[str]:
    chosen = (
        "the one given. "
        if command != CHOOSE
        else "read the repository and choose the command that runs its tests from its root, "
        "e.g. pytest -q or npm test. "
    )
    return [
        connect,
        (
            "The test command: "
            + chosen
            + "It runs in a checkout of each commit after the build steps (pip install, npm "
            "install, the spec's build_command), in the app's build sandbox, without the "
            "app's secret env vars; exit 0 is green."
        ),
        call("manage_ci", **configure)
        + ": from now on CI decides what a push does: each push to the branch is tested "
        "and each green commit deployed"
        + (
            " (and deploy_app refuses a commit without a passed run)"
            if configure["require_green"]
            else ""
        )
        + ".",
        f"Test the branch head now, {AS_TASK}: "
        + call("manage_ci", action="trigger", app_id=number)
        + ". Red: "
        + call("manage_ci", action="logs", app_id=number, number=1)
        + " with the run's number shows why; fix the code or the command and push again.",
        f"Prove the loop: commit a change and {push}; "
        + call("manage_ci", action="runs", app_id=number)
        + " shows its run; a passed run names its deployment, which "
        + call("list_deployments", app_id=number)
        + " shows going live. Then "
        + call("get_app_url", app_id=number)
        + " and request the URL.",
    ]


def register(registry: Registry, platform: Platform) -> None:
    async def set_up(args: dict[str, str], ctx: ToolContext) -> JsonObject:
        number = app_id(args)
        command = text(args, "test_command", limit=MAX_COMMAND) or CHOOSE
        require_green = flag(args, "require_green")
        strategy = choice(args, "strategy", STRATEGIES, None)
        name = (await platform.apps.get(ctx.principal, number)).app.name
        try:
            repo = await platform.repos.get(ctx.principal, number)
        except NotFound:
            repo = None
        try:
            ci = (await platform.ci.get(ctx.principal, number)).config
        except NotFound:
            ci = None
        push_url = None
        if platform.hosting is not None and (repo is None or repo.url == HOSTED):
            push_url = await platform.hosting.push_url_of(number)
        where, connect = _connection(number, repo, push_url)
        configure: dict[str, Any] = {
            "action": "configure",
            "app_id": number,
            "test_command": command,
            "auto_deploy": True,
            "require_green": require_green,
        }
        if strategy:
            configure["strategy"] = strategy
        push = f"git push {push_url} HEAD:{repo.branch if repo else 'main'}" if push_url else "push"
        return workflow(
            f"CI and auto-deploy for {name}",
            f"Set up CI for the app {name} (app_id {number}): its tests run at each push, and "
            f"each green commit deploys itself.\nNow: {where}; CI {_ci_now(ci)}.",
            _steps(number, connect, command, configure, push),
            "If the tests need the app's secrets, "
            + call("set_app_spec", app_id=number, spec={"ci": {"secrets": True}})
            + " (admin or owner of the app) gives them to CI and to the build steps.",
        )

    registry.add_prompt(
        PromptDef(
            "set_up_ci_and_auto_deploy",
            set_up,
            title="Set up CI and auto-deploy",
            description="Connect the app's repository, run its tests at each push, deploy each "
            "green commit; check it on the head and on a new push.",
            arguments=[
                PromptArgument("app_id", "The app's id", required=True),
                PromptArgument(
                    "test_command", "The command that runs the tests (default: choose one)"
                ),
                PromptArgument(
                    "require_green", "true: refuse deploys of untested commits (default false)"
                ),
                PromptArgument(
                    "strategy", "recreate, rolling, blue_green or canary (default: the spec's)"
                ),
            ],
            scope="apps:write",
        )
    )
