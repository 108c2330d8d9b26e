"""The app's actions, each behind a confirmation page: rollback, restart, stop, start and
cancelling a deploy in progress. The platform checks the role (developer and up), exactly as
for the tools; the console's own audit line records who did what from here.

An action runs on in the background (a rollback takes seconds): the answer waits for it at
most :data:`WAIT_S`, then sends the browser to the app, whose timeline shows the rest live. An
action refused at once (a role, a conflict) is shown as its error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from appdeck.common.errors import AppDeckError, NotFound
from appdeck.console.context import Console, Viewer
from appdeck.console.guard import GET, POST, FormRefused, PageRoute, failure, text
from appdeck.console.render import HEADERS, page
from appdeck.console.views.app import app_context, app_id_of

WAIT_S: Final = 2.0
_RUNNING: set[asyncio.Task[object]] = set()


@dataclass(frozen=True, slots=True)
class Action:
    label: str
    question: str
    """Shown on the confirmation page; ``{app}`` and ``{number}`` are filled in."""
    done: str
    run: Callable[[Console, Viewer, int, int | None], Coroutine[Any, Any, object]]


async def _rollback(console: Console, viewer: Viewer, app_id: int, number: int | None) -> object:
    return await console.platform.deployments.rollback(
        viewer.principal, app_id, number, confirmed=True
    )


async def _restart(console: Console, viewer: Viewer, app_id: int, number: int | None) -> object:
    return await console.platform.deployments.restart(viewer.principal, app_id)


async def _stop(console: Console, viewer: Viewer, app_id: int, number: int | None) -> object:
    return await console.platform.deployments.stop(viewer.principal, app_id)


async def _start(console: Console, viewer: Viewer, app_id: int, number: int | None) -> object:
    return await console.platform.deployments.start(viewer.principal, app_id)


async def _cancel(console: Console, viewer: Viewer, app_id: int, number: int | None) -> object:
    return await console.platform.deployments.cancel(viewer.principal, app_id, number)


ACTIONS: Final[dict[str, Action]] = {
    "rollback": Action(
        "Roll back",
        "Put {target} of {app} back live? The live release stops serving.",
        "Rollback started",
        _rollback,
    ),
    "restart": Action(
        "Restart",
        "Restart every instance of {app}'s live release, one at a time?",
        "Restart started",
        _restart,
    ),
    "stop": Action(
        "Stop",
        "Stop {app}? Its instances end and its URL answers 503 until it is started again; "
        "its data is kept.",
        "Stopped",
        _stop,
    ),
    "start": Action("Start", "Start {app}'s live release again?", "Starting", _start),
    "cancel": Action(
        "Cancel deploy",
        "Cancel {target} of {app}? The live release keeps serving.",
        "Cancel requested",
        _cancel,
    ),
}


def _action(request: Request) -> tuple[str, Action]:
    name = str(request.path_params.get("action", ""))
    action = ACTIONS.get(name)
    if action is None:
        raise NotFound(f"no action {name[:40]}")
    return name, action


def _number(raw: str | None) -> int | None:
    if raw and raw.isascii() and raw.isdigit() and len(raw) < 10:
        return int(raw)
    return None


def _target(name: str, number: int | None) -> str:
    if number is not None:
        return f"deployment #{number}"
    return "the release before the live one" if name == "rollback" else "the deploy in progress"


async def confirm(request: Request, console: Console, viewer: Viewer) -> Response:
    name, action = _action(request)
    app_id = app_id_of(request)
    view = await console.platform.apps.load(viewer.principal, app_id, "deploy.write")
    number = _number(request.query_params.get("number"))
    question = action.question.format(app=view.app.name, target=_target(name, number))
    return page(
        request,
        "confirm.html",
        title=f"{action.label} {view.app.name}",
        action_name=name,
        action=action,
        question=question,
        number=number,
        **app_context(view, viewer, app_id, ""),
    )


async def perform(request: Request, console: Console, viewer: Viewer) -> Response:
    name, action = _action(request)
    app_id = app_id_of(request)
    form = request.state.form
    if text(form, "confirm", 10) != "yes":
        raise FormRefused(400, "The action was not confirmed.")
    number = _number(text(form, "number", 12))
    await console.platform.apps.load(viewer.principal, app_id, "deploy.write")
    task: asyncio.Task[object] = asyncio.create_task(
        action.run(console, viewer, app_id, number), name=f"console-{name}"
    )
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)
    task.add_done_callback(lambda t: _audit(console, viewer, name, app_id, t))
    done, _ = await asyncio.wait({task}, timeout=WAIT_S)
    if done and task.exception() is not None:
        error = task.exception()
        if isinstance(error, AppDeckError):
            return failure(request, viewer, error)
        raise error  # type: ignore[misc]
    return RedirectResponse(f"/console/apps/{app_id}?done={name}", status_code=303, headers=HEADERS)


def _audit(
    console: Console, viewer: Viewer, name: str, app_id: int, task: asyncio.Task[object]
) -> None:
    error = None if task.cancelled() else task.exception()
    console.record(
        "console_action",
        "ok" if error is None and not task.cancelled() else "error",
        f"POST /console/apps/{app_id}/actions/{name}",
        by=viewer.principal,
        action=name,
        app_id=app_id,
        detail={"error": getattr(error, "code", "internal")} if error is not None else None,
    )


ROUTES: Final[list[PageRoute]] = [
    ("/apps/{app_id}/actions/{action}", confirm, GET),
    ("/apps/{app_id}/actions/{action}", perform, POST),
]
