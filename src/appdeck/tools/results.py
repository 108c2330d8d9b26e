"""Result models more than one tool returns: an app, its members, a deployment."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from appdeck.tools.kit import Output


class AppSummary(Output):
    app_id: int
    name: str
    description: str | None
    url: str = Field(description="Where the ingress serves the app (once it has a live release).")
    your_role: str = Field(description="owner, admin, developer or viewer.")
    runtime: str | None
    needs_restart: bool = Field(description="Env vars changed since the last deploy or restart.")
    stopped: bool = Field(
        description="Stopped (restart_app action stop): no instance runs, its URL answers 503 "
        '"stopped" until restart_app action start.'
    )
    updated_at: float


class AppDetail(AppSummary):
    spec: dict[str, Any] = Field(description="The complete spec, defaults filled in.")
    spec_version: int
    created_by: str
    created_at: float


class Member(Output):
    user: str
    role: str
    granted_at: float


class Deployment(Output):
    """One deployment, as deploy_app, rollback_deploy, restart_app and list_deployments
    return it."""

    app_id: int
    number: int = Field(description="Per app, from 1.")
    state: str = Field(
        description="queued, building, starting, canary, live; or failed, rolled_back, "
        "cancelled, superseded."
    )
    strategy: str
    traffic_percent: int
    status_message: str | None
    previous: int | None = Field(description="The release that was live when it started.")
    created_by: str
    created_at: float
    updated_at: float
    steps: list[dict[str, Any]] | None = Field(
        default=None, description="Every step so far (not in list_deployments)."
    )
    source: dict[str, Any]
    url: str
    done: bool = Field(description="False while the deployment is still in progress.")
