"""Which app resources a platform change updates (the status resource's subscriptions)."""

from __future__ import annotations

from appdeck.platform.changes import Change
from appdeck.resources.apps import changed, status_uri


def test_a_crash_or_restart_updates_the_apps_status_only() -> None:
    assert changed(Change("instance.updated", "acme", 7, deployment=3)) == (
        ["appdeck://apps/7/status"],
        False,
    )


def test_a_deployment_change_updates_its_list_and_the_apps_status() -> None:
    uris, listed = changed(Change("deployment.updated", "acme", 7, deployment=3))
    assert uris == ["appdeck://apps/7/deployments", status_uri(7)]
    assert not listed


def test_a_stop_or_start_of_the_app_updates_its_status_too() -> None:
    uris, _ = changed(Change("app.updated", "acme", 7))
    assert status_uri(7) in uris
    assert "appdeck://apps" in uris


def test_an_env_change_leaves_the_status_alone() -> None:
    uris, _ = changed(Change("env.updated", "acme", 7))
    assert status_uri(7) not in uris


def test_a_received_commit_notifies_nothing_of_its_own() -> None:
    """Its ``app.updated``, emitted with it, notifies the app's subscribers once."""
    assert changed(Change("commit.received", "acme", 7, commit="a" * 40)) == ([], False)
