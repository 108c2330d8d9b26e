"""deploy_app, rollback_deploy, restart_app, list_deployments: adapters over the platform's
Deployments service (which owns the wait policy and the rollback-confirmation rule)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, WithJsonSchema

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.platform.deploy import policy, states
from appdeck.platform.deploy.deployments import DeploymentView
from appdeck.platform.deploy.deployments import Operated as Operated_
from appdeck.platform.deploy.running import MAX_INSTANCES
from appdeck.tools.kit import (
    INT64_MAX,
    READS,
    AppId,
    Arguments,
    Call,
    Hints,
    Output,
    Reply,
    Tool,
    paginate,
)
from appdeck.tools.repos import Files, inline_files
from appdeck.tools.results import Deployment

Strategy = Literal["recreate", "rolling", "blue_green", "canary"]
Number = Annotated[
    int, Field(ge=1, le=INT64_MAX, description="A deployment number (list_deployments).")
]
State = Annotated[str, WithJsonSchema({"enum": sorted(states.TRANSITIONS)})]


def deployment(view: DeploymentView, *, steps: bool = True) -> Deployment:
    return Deployment.model_validate(view.public(steps=steps))


deploy_app = Tool(
    "deploy_app",
    title="Deploy an app",
    description="Deploy the app's current spec and source (run preflight_check first); with "
    "a connected repository, its branch's head or a given commit. strategy: recreate | "
    "rolling | blue_green | canary (default: the spec's default_strategy). Runs as a task "
    "when the call carries task (progress and a status message per step); otherwise waits "
    f"up to wait_seconds (default {policy.DEFAULT_WAIT_S:g}, at most {policy.MAX_WAIT_S:g}) "
    "and returns the deployment so far (done: false means follow it with list_deployments). "
    "The live version keeps serving until the new one is healthy; a failing canary is rolled "
    "back automatically. A deploy that ends failed or rolled back is an error result "
    "carrying the deployment: tail_deploy_logs shows why. action cancel stops the deployment "
    "in progress (as tasks/cancel on its task would): it ends cancelled, the live release "
    "keeps serving. files (for agents that cannot run git): [{path, content, encoding}] "
    "committed to the app's hosted repository by you, then that commit is deployed (files "
    "not listed keep their content from the previous commit; content null deletes a path; "
    "rollback_deploy and CI work as for any commit). An app connected to no repository is "
    "connected to its hosted one.",
    scope="deploy:write",
    hints=Hints(read_only=False),
    task_support="optional",
)

Commit = Annotated[
    str,
    Field(
        pattern="^[0-9a-fA-F]{7,64}$",
        description="With a connected repository: the commit to deploy, a full sha or a "
        "prefix of at least 7 hex digits (default: the branch's head). Deploys an older "
        "commit again too.",
    ),
]


class DeployApp(Arguments):
    """Deploy (the default action)."""

    action: Literal["deploy"] = "deploy"
    app_id: AppId
    strategy: Strategy | None = None
    commit: Commit | None = None
    wait_seconds: float | None = Field(default=None, ge=0, le=policy.MAX_WAIT_S)
    files: Files | None = None


@deploy_app.handles(DeployApp, Deployment)
async def _deploy(args: DeployApp, call: Call) -> Reply:
    steps = 0
    commit = args.commit.lower() if args.commit else None
    if args.files is not None:
        if commit is not None:
            raise InvalidArgument("give files or commit, not both", field="commit")
        if call.platform.hosting is None:
            raise FailedPrecondition("inline files are off on this server (hosted repositories)")
        made = await call.platform.hosting.commit_files(
            call.principal, args.app_id, inline_files(args.files)
        )
        commit = made.sha

    async def progress(message: str, traffic: int | None) -> None:
        nonlocal steps
        steps += 1
        await call.ctx.report(message, steps, None)

    view = await call.platform.deployments.deploy(
        call.principal,
        args.app_id,
        args.strategy,
        wait_s=None if call.as_task else policy.wait_seconds(args.wait_seconds),
        progress=progress,
        commit=commit,
    )
    record, data = view.record, deployment(view)
    if not view.done:
        return Reply(
            f"Deployment #{record.number} is still {record.state}; follow it with "
            f"list_deployments or subscribe to appdeck://apps/{view.app.id}/deployments",
            data,
        )
    summary = f"Deployment #{record.number} of {view.app.name}: {record.state}. "
    summary += record.status_message or ""
    if view.live:
        return Reply(summary, data)
    failed = FailedPrecondition(
        record.status_message or record.state,
        hint="tail_deploy_logs shows the build and runtime logs",
    )
    return Reply(summary, data, error=failed)


class CancelDeploy(Arguments):
    """Cancel the deployment in progress: its new release stops, the live one keeps
    serving, it ends cancelled. For clients that do not drive tasks (else tasks/cancel)."""

    action: Literal["cancel"]
    app_id: AppId
    number: Number | None = Field(
        default=None, description="The deployment in progress: checked if given."
    )


@deploy_app.handles(CancelDeploy, Deployment)
async def _cancel(args: CancelDeploy, call: Call) -> Reply:
    view = await call.platform.deployments.cancel(call.principal, args.app_id, args.number)
    record = view.record
    return Reply(
        f"Deployment #{record.number} of {view.app.name}: {record.state}", deployment(view)
    )


rollback_deploy = Tool(
    "rollback_deploy",
    title="Roll back",
    description="Put a previous release back live when the live one misbehaves: the one "
    "before it (default), or a given number (a superseded or rolled-back deployment, see "
    "list_deployments). Instant while the old release is still warm (blue_green). Going back "
    "further than the previous release asks you to confirm (or pass confirm: true). Returns "
    "the deployment now live.",
    scope="deploy:write",
    hints=Hints(read_only=False, destructive=True),
)


class RollbackDeploy(Arguments):
    app_id: AppId
    number: Number | None = None
    confirm: bool = Field(default=False, description="Confirm a rollback past the previous one.")


@rollback_deploy.handles(RollbackDeploy, Deployment)
async def _rollback(args: RollbackDeploy, call: Call) -> Reply:
    async def rollback(confirmed: bool) -> DeploymentView:
        return await call.platform.deployments.rollback(
            call.principal, args.app_id, args.number, confirmed=confirmed
        )

    view = await call.confirming(rollback, confirm=args.confirm)
    return Reply(
        f"Rolled back {view.app.name} to deployment #{view.record.number}", deployment(view)
    )


restart_app = Tool(
    "restart_app",
    title="Restart, stop, start or scale an app",
    description="Operate the live release without a new one. restart (default): instance by "
    "instance (a spare instance first), without downtime: use it after env_vars changes. "
    'stop: no instance runs and the app\'s URL answers 503 "stopped"; its data (tables, '
    "env vars, deployments) is kept, unlike manage_app delete; it stays stopped across "
    "server restarts, and deploys, rollbacks and restarts are refused until start. start: "
    "the live release runs again. scale: run `instances` instances now (also the spec's count "
    "for the next deploys). Returns the live deployment, whether the app is stopped and how "
    "many instances run.",
    scope="deploy:write",
    hints=Hints(read_only=False),
)


class RestartApp(Arguments):
    """Restart instance by instance (the default action)."""

    action: Literal["restart"] = "restart"
    app_id: AppId


class StopApp(Arguments):
    """Stop every instance; the URL answers 503 "stopped"; data kept."""

    action: Literal["stop"]
    app_id: AppId


class StartApp(Arguments):
    """Start a stopped app's live release again."""

    action: Literal["start"]
    app_id: AppId


class ScaleApp(Arguments):
    """Run this many instances of the live release now."""

    action: Literal["scale"]
    app_id: AppId
    instances: int = Field(ge=1, le=MAX_INSTANCES, description="How many to run.")


class Operated(Deployment):
    app_stopped: bool = Field(description="Stopped: no instance runs, the URL answers 503.")
    running_instances: int = Field(description="Instances of the live release running now.")


def operated(done: Operated_) -> Operated:
    if done.live is None:  # stop and scale need a live release; start of an app without one
        raise FailedPrecondition(
            f"{done.app.name} has no live release", hint="deploy_app to give it one"
        )
    data = {**done.live.public(), "app_stopped": done.stopped, "running_instances": done.running}
    return Operated.model_validate(data)


@restart_app.handles(RestartApp, Operated)
async def _restart(args: RestartApp, call: Call) -> Reply:
    view = await call.platform.deployments.restart(call.principal, args.app_id)
    running = int(view.record.spec.get("instances") or 1)
    data = {**view.public(), "app_stopped": False, "running_instances": running}
    return Reply(f"Restarted {view.app.name} (rolling)", Operated.model_validate(data))


@restart_app.handles(StopApp, Operated)
async def _stop(args: StopApp, call: Call) -> Reply:
    done = await call.platform.deployments.stop(call.principal, args.app_id)
    return Reply(
        f"Stopped {done.app.name}: no instance runs, its URL answers 503 (data kept); "
        "restart_app action start brings it back",
        operated(done),
    )


@restart_app.handles(StartApp, Operated)
async def _start(args: StartApp, call: Call) -> Reply:
    done = await call.platform.deployments.start(call.principal, args.app_id)
    return Reply(f"Started {done.app.name}: {done.running} instance(s) run", operated(done))


@restart_app.handles(ScaleApp, Operated)
async def _scale(args: ScaleApp, call: Call) -> Reply:
    done = await call.platform.deployments.scale(call.principal, args.app_id, args.instances)
    said = f"Scaled {done.app.name} to {args.instances} instance(s)"
    if done.stopped:
        said += " (it is stopped: they run once started)"
    return Reply(said, operated(done))


list_deployments = Tool(
    "list_deployments",
    title="List deployments",
    description="An app's deployments, newest first, with state, strategy and traffic share: "
    "to follow a deploy, or find a number for rollback_deploy or tail_deploy_logs. Filter by "
    "states; paginated (next_cursor).",
    scope="deploy:read",
    hints=READS,
)


class ListDeployments(Arguments):
    app_id: AppId
    states: list[State] | None = None
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")
    limit: int = Field(default=20, ge=1, le=100)


class DeploymentList(Output):
    app_id: int
    deployments: list[Deployment]
    next_cursor: str | None = Field(default=None, description="Present when there is more.")


@list_deployments.handles(ListDeployments, DeploymentList)
async def _list(args: ListDeployments, call: Call) -> Reply:
    async def fetch(offset: int, limit: int) -> list[DeploymentView]:
        return await call.platform.deployments.list(
            call.principal, args.app_id, states_=args.states, offset=offset, limit=limit
        )

    page = await paginate(fetch, args.cursor, args.limit)
    data = DeploymentList(
        app_id=args.app_id, deployments=[deployment(v, steps=False) for v in page.items]
    )
    if page.next_cursor:
        data.next_cursor = page.next_cursor
    line = ", ".join(f"#{v.record.number} {v.record.state}" for v in page.items) or "none yet"
    name = page.items[0].app.name if page.items else f"app {args.app_id}"
    return Reply(f"Deployments of {name}: {line}", data)


TOOLS = (deploy_app, rollback_deploy, restart_app, list_deployments)
