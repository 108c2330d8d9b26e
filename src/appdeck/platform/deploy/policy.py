"""The rules around a deploy that are not the deploy itself: how long a caller waits for one,
which rollbacks need a human's confirmation, and the refusals the engine's operations share.
Pure functions: the services apply them, a CLI or a web page gets the same answers."""

from __future__ import annotations

from typing import Final

from appdeck.common.errors import Conflict, FailedPrecondition
from appdeck.storage.apps import AppRecord
from appdeck.storage.deployments import DeploymentRecord

DEFAULT_WAIT_S: Final = 20.0
"""A deploy not run as a task answers after this long with the deployment so far (it goes on
in the background; list_deployments or the deployments resource follow it)."""
MAX_WAIT_S: Final = 60.0
"""The longest a caller may ask to wait: longer work belongs in a task."""


def wait_seconds(requested: float | None) -> float:
    """How long a deploy outside a task waits for its outcome."""
    if requested is None:
        return DEFAULT_WAIT_S
    return min(max(float(requested), 0.0), MAX_WAIT_S)


def rollback_needs_confirmation(live: DeploymentRecord | None, number: int | None) -> bool:
    """Going back to the release just before the live one is routine; going further back
    (skipping releases someone shipped since) is destructive and is confirmed first."""
    return number is not None and live is not None and number != live.previous


class DeployBusy(Conflict):
    """The app's lease is held: a deployment (or a rollback or restart) is under way. A
    deploy asked by a push waits for it (:func:`appdeck.platform.deploy.queued.when_free`)."""


def in_progress(record: DeploymentRecord) -> Conflict:
    return DeployBusy(
        f"deployment {record.number} of this app is still {record.state}",
        hint="wait for it (list_deployments) before deploying again",
    )


def refuse_if_stopped(app: AppRecord, what: str) -> None:
    """A deploy, rollback or restart of a stopped app is refused: it would start it."""
    if app.stopped:
        raise FailedPrecondition(
            f"the app is stopped: {what} would start it",
            hint="restart_app with action start first",
        )
