"""whats_next: the ordered next steps for one app or the caller's whole account (an adapter
over AdviceService; the rules are platform/advice/steps.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from appdeck.platform.advice.service import AppAdvice
from appdeck.platform.advice.steps import Advice, Step
from appdeck.platform.apps import AppView
from appdeck.tools.kit import READS, AppId, Arguments, Call, Output, Reply, Tool, paginate

whats_next = Tool(
    "whats_next",
    title="What to do next",
    description="The ordered next steps for one app (app_id), or for every app of yours "
    "(no app_id: paginated over apps), derived from its state: source, spec, deployments, "
    "env changes, repository and CI. Each step is an exact tool call (tool and arguments, "
    "callable as is once the arguments named in fill_in, written <like this>, are filled "
    "in), with why in one sentence and its kind (fix, wait, setup, ship, check, improve). "
    "Only steps your role and token can call are listed; withheld counts the others. Call "
    "it whenever you are unsure what to do, and again after each step.",
    scope="apps:read",
    hints=READS,
)

Kind = Literal["fix", "wait", "setup", "ship", "check", "improve"]


class WhatsNextArgs(Arguments):
    app_id: AppId | None = Field(
        default=None, description="One app; leave it out for every app of yours."
    )
    cursor: str | None = Field(
        default=None,
        max_length=512,
        description="next_cursor of the previous page (without app_id).",
    )
    limit: int = Field(default=10, ge=1, le=20, description="Apps per page (without app_id).")


class NextStep(Output):
    priority: int = Field(description="1 is the first step to take.")
    tool: str
    arguments: dict[str, Any] = Field(description="Exactly what to pass to the tool.")
    why: str
    kind: Kind
    fill_in: list[str] = Field(
        description="Arguments holding a <placeholder> or example to replace first."
    )
    app_id: int | None = Field(description="The app the step is about (None: the account).")


class AppNext(Output):
    app_id: int
    name: str
    status: str = Field(
        description="needs_source, needs_run_command, stopped, deploying, deploy_failed, "
        "ci_failed, testing, not_deployed, behind, needs_restart or ok."
    )
    summary: str
    urgent: bool = Field(description="A step fixes something broken.")
    steps: list[NextStep]
    withheld: int = Field(description="Steps your role or token scopes cannot call.")


class WhatsNext(Output):
    status: str
    summary: str
    steps: list[NextStep] = Field(
        description="In order: the app's steps, or (for the account) each app's first step, "
        "the urgent ones first."
    )
    withheld: int
    apps: list[AppNext]
    next_cursor: str | None = Field(default=None, description="Present when there are more apps.")


def _steps(steps: tuple[Step, ...], app_ids: list[int | None]) -> list[NextStep]:
    return [
        NextStep(
            priority=i,
            tool=s.tool,
            arguments=dict(s.arguments),
            why=s.why,
            kind=s.kind,
            fill_in=list(s.fill_in),
            app_id=app_id,
        )
        for i, (s, app_id) in enumerate(zip(steps, app_ids, strict=True), start=1)
    ]


def _app(found: AppAdvice) -> AppNext:
    a = found.advice
    return AppNext(
        app_id=found.app_id,
        name=found.name,
        status=a.status,
        summary=a.summary,
        urgent=a.urgent,
        steps=_steps(a.steps, [found.app_id] * len(a.steps)),
        withheld=a.withheld,
    )


def _whole(advice: Advice, apps: list[AppNext]) -> WhatsNext:
    app_ids: list[int | None] = [
        s.arguments.get("app_id") if isinstance(s.arguments.get("app_id"), int) else None
        for s in advice.steps
    ]
    return WhatsNext(
        status=advice.status,
        summary=advice.summary,
        steps=_steps(advice.steps, app_ids),
        withheld=advice.withheld,
        apps=apps,
    )


def _line(advice: Advice) -> str:
    first = advice.steps[0].tool if advice.steps else "nothing to call"
    return f"{advice.summary} First: {first}."


@whats_next.handles(WhatsNextArgs, WhatsNext)
async def _whats_next(args: WhatsNextArgs, call: Call) -> Reply:
    if args.app_id is not None:
        found = await call.platform.advice.for_app(call.principal, args.app_id)
        return Reply(f"{found.name}: {_line(found.advice)}", _whole(found.advice, [_app(found)]))

    async def fetch(offset: int, limit: int) -> list[AppView]:
        return await call.platform.apps.list_apps(call.principal, offset=offset, limit=limit)

    page = await paginate(fetch, args.cursor, args.limit)
    account = await call.platform.advice.for_apps(
        call.principal, page.items, first_page=args.cursor is None
    )
    data = _whole(account.advice, [_app(a) for a in account.apps])
    if page.next_cursor:
        data.next_cursor = page.next_cursor
    return Reply(f"{len(account.apps)} app(s). {_line(account.advice)}", data)


TOOLS = (whats_next,)
