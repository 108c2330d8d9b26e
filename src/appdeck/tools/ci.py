"""manage_ci: an app's CI (CIService): configure, get, trigger, runs, logs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from appdeck.common.errors import FailedPrecondition
from appdeck.platform.ci.service import (
    DEFAULT_TIMEOUT_S,
    MAX_COMMAND,
    MAX_TIMEOUT_S,
    CIConfigView,
    CIRunRecord,
)
from appdeck.platform.deploy import policy
from appdeck.tools.kit import (
    INT64_MAX,
    AppId,
    Arguments,
    Call,
    Hints,
    Output,
    Reply,
    Tool,
    paginate,
)

manage_ci = Tool(
    "manage_ci",
    title="Manage CI",
    description="An app's CI: run a test command at each commit pushed to the connected "
    "repository's branch (webhook or polling), in the app's build sandbox, with a time "
    "limit. configure (test_command, auto_deploy: deploy each green commit, require_green: "
    "refuse deploys of commits without a passing run, strategy, timeout_seconds); get; "
    "trigger (the branch head or a commit; runs as a task when the call carries task, else "
    "waits up to wait_seconds); runs (newest first); logs (one run's log, masked). Needs "
    "connect_repo first.",
    scope="apps:read",
    hints=Hints(read_only=False),
    task_support="optional",
)

RunNumber = Annotated[int, Field(ge=1, le=INT64_MAX, description="A CI run's number (runs).")]
RunState = Literal["queued", "running", "passed", "failed", "timed_out", "error", "cancelled"]


class Configure(Arguments):
    """Set the app's CI (replacing what was set). Needs test_command."""

    action: Literal["configure"]
    app_id: AppId
    test_command: str = Field(
        min_length=1,
        max_length=MAX_COMMAND,
        description="A shell command run in a checkout of the commit (after the build steps); "
        "exit 0 is green.",
    )
    branch: str | None = Field(
        default=None, max_length=200, description="The connected branch (the default)."
    )
    auto_deploy: bool = Field(default=False, description="Deploy each commit whose run passed.")
    require_green: bool = Field(
        default=False, description="Refuse deploys of commits without a passed run."
    )
    strategy: Literal["recreate", "rolling", "blue_green", "canary"] | None = Field(
        default=None, description="For automatic deploys (default: the spec's)."
    )
    timeout_seconds: int = Field(default=DEFAULT_TIMEOUT_S, ge=1, le=MAX_TIMEOUT_S)


class GetCI(Arguments):
    """The app's CI configuration and its last run."""

    action: Literal["get"]
    app_id: AppId


class Trigger(Arguments):
    """Run the tests of the branch head, or of commit (a full sha in the branch's history)."""

    action: Literal["trigger"]
    app_id: AppId
    commit: str | None = Field(default=None, min_length=40, max_length=64)
    wait_seconds: float | None = Field(default=None, ge=0, le=policy.MAX_WAIT_S)


class ListRuns(Arguments):
    """The app's CI runs, newest first. Paginated."""

    action: Literal["runs"]
    app_id: AppId
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")
    limit: int = Field(default=20, ge=1, le=100)


class RunLogs(Arguments):
    """One run's log (its last 256 KiB at most, secrets masked); tail_lines keeps the end."""

    action: Literal["logs"]
    app_id: AppId
    number: RunNumber
    tail_lines: int = Field(default=200, ge=1, le=5000)


class Config(Output):
    branch: str | None
    test_command: str
    auto_deploy: bool
    require_green: bool
    strategy: str | None
    timeout_seconds: int
    updated_by: str
    updated_at: float


class Run(Output):
    number: int
    state: RunState
    commit: str
    message: str | None
    branch: str
    trigger: str = Field(description="push | poll | manual")
    status_message: str | None
    exit_code: int | None
    deployment: int | None = Field(description="The deployment a green run started.")
    created_by: str
    created_at: float
    started_at: float | None
    finished_at: float | None


class CIResult(Output):
    app_id: int
    config: Config
    last_run: Run | None


class RunResult(Output):
    app_id: int
    run: Run
    done: bool = Field(description="False: still queued or running (follow it with runs).")


class Runs(Output):
    app_id: int
    runs: list[Run]
    next_cursor: str | None = Field(default=None, description="Present when there is more.")


class Logs(Output):
    app_id: int
    number: int
    state: RunState
    log: str
    truncated: bool = Field(description="True when only the last tail_lines are shown.")


def _config(view: CIConfigView) -> CIResult:
    c = view.config
    return CIResult(
        app_id=c.app_id,
        config=Config(
            branch=c.branch,
            test_command=c.test_command,
            auto_deploy=c.auto_deploy,
            require_green=c.require_green,
            strategy=c.strategy,
            timeout_seconds=c.timeout_seconds,
            updated_by=c.updated_by,
            updated_at=c.updated_at,
        ),
        last_run=_run(view.last_run) if view.last_run else None,
    )


def _run(r: CIRunRecord) -> Run:
    return Run(
        number=r.number,
        state=r.state,  # type: ignore[arg-type]
        commit=r.commit,
        message=r.message,
        branch=r.branch,
        trigger=r.trigger,
        status_message=r.status_message,
        exit_code=r.exit_code,
        deployment=r.deployment,
        created_by=r.created_by,
        created_at=r.created_at,
        started_at=r.started_at,
        finished_at=r.finished_at,
    )


@manage_ci.handles(Configure, CIResult, scope="apps:write")
async def _configure(args: Configure, call: Call) -> Reply:
    view = await call.platform.ci.configure(
        call.principal,
        args.app_id,
        test_command=args.test_command,
        branch=args.branch,
        auto_deploy=args.auto_deploy,
        require_green=args.require_green,
        strategy=args.strategy,
        timeout_seconds=args.timeout_seconds,
    )
    then = "each green commit deploys itself" if args.auto_deploy else "deploy_app when green"
    return Reply(
        f"CI of app {args.app_id} runs {args.test_command[:80]!r} at each push; {then}. "
        "Next: push a commit, or manage_ci trigger.",
        _config(view),
    )


@manage_ci.handles(GetCI, CIResult)
async def _get(args: GetCI, call: Call) -> Reply:
    view = await call.platform.ci.get(call.principal, args.app_id)
    last = view.last_run
    said = f"; last run #{last.number} {last.state}" if last else "; no run yet"
    return Reply(f"CI of app {args.app_id}: {view.config.test_command[:80]!r}{said}", _config(view))


@manage_ci.handles(Trigger, RunResult, scope="apps:write")
async def _trigger(args: Trigger, call: Call) -> Reply:
    record, task = await call.platform.ci.trigger(call.principal, args.app_id, args.commit)
    await call.ctx.report(f"CI run #{record.number} of {record.commit[:12]} started", 1, None)
    within = None if call.as_task else policy.wait_seconds(args.wait_seconds)
    if within is None:
        await task
    ended = await call.platform.ci.wait(args.app_id, record.number, within)
    done = ended.state not in ("queued", "running")
    data = RunResult(app_id=args.app_id, run=_run(ended), done=done)
    summary = f"CI run #{ended.number} of {ended.commit[:12]}: {ended.state}"
    if not done:
        return Reply(f"{summary}; follow it with manage_ci runs", data)
    if ended.state != "passed":
        failed = FailedPrecondition(
            f"{summary}: {ended.status_message or ''}".strip(),
            hint=f"manage_ci logs with number {ended.number} shows why",
        )
        return Reply(summary, data, error=failed)
    return Reply(f"{summary}. {ended.status_message or ''}".strip(), data)


@manage_ci.handles(ListRuns, Runs)
async def _runs(args: ListRuns, call: Call) -> Reply:
    async def fetch(offset: int, limit: int) -> list[CIRunRecord]:
        return await call.platform.ci.runs(call.principal, args.app_id, offset=offset, limit=limit)

    page = await paginate(fetch, args.cursor, args.limit)
    data = Runs(app_id=args.app_id, runs=[_run(r) for r in page.items])
    if page.next_cursor:
        data.next_cursor = page.next_cursor
    states = ", ".join(f"#{r.number} {r.state}" for r in page.items[:5])
    return Reply(f"{len(page.items)} CI run(s){': ' + states if states else ''}", data)


@manage_ci.handles(RunLogs, Logs)
async def _logs(args: RunLogs, call: Call) -> Reply:
    run = await call.platform.ci.run(call.principal, args.app_id, args.number)
    lines = run.log.splitlines()
    shown = lines[-args.tail_lines :]
    data = Logs(
        app_id=args.app_id,
        number=run.number,
        state=run.state,  # type: ignore[arg-type]
        log="\n".join(shown),
        truncated=len(shown) < len(lines),
    )
    return Reply(f"CI run #{run.number} ({run.state}): {len(shown)} line(s) of log", data)


TOOLS = (manage_ci,)
