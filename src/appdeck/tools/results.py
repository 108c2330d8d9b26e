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


class HealthBrief(Output):
    """An app's health in a few numbers (list_my_apps)."""

    state: str = Field(
        description="running, degraded (fewer instances up than desired), crash_loop, "
        "stopped or not_deployed."
    )
    up: int = Field(description="Instances running now.")
    desired: int = Field(description="Instances its live release asks for.")
    restarts: int = Field(description="Restarts after crashes, over its instances.")


class InstanceHealth(Output):
    index: int
    state: str = Field(description="running, restarting, crash_loop or stopped.")
    restarts: int
    last_exit: str | None = Field(
        description="How its last crashed process ended: 'status N' or 'signal NAME'."
    )
    oom_kills: int = Field(description="Processes killed by the kernel at the memory limit.")
    memory_bytes: int | None = Field(description="Memory now (null: not measured here).")
    cpu_seconds: float | None = Field(description="CPU time used (null: not measured here).")
    started_at: float | None


class AppHealth(Output):
    """An app's health (manage_app get, and the resource appdeck://apps/{app_id}/status)."""

    app_id: int
    state: str = Field(
        description="running, degraded, crash_loop, stopped or not_deployed (see list_my_apps)."
    )
    live: dict[str, Any] | None = Field(
        description="The live release: number, strategy, since (epoch seconds)."
    )
    instances: dict[str, int] = Field(description="up and desired.")
    restarts: int
    instance_details: list[InstanceHealth]
    disk: dict[str, int] | None = Field(description="used_bytes against quota_bytes.")
    traffic: dict[str, Any] = Field(
        description="requests, errors_5xx and mean_latency_ms over window_s seconds (up to "
        "the last 5 minutes), through the ingress."
    )
    tls: dict[str, Any] | None = Field(description="The public hostname's certificate.")


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
