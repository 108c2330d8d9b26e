"""A release: one deployment of an app, frozen. The one shape it has from the deploy engine to
the runtime driver (and a Kubernetes driver later).

:class:`AppSpec` is the app spec typed, with its defaults applied once, here, when it is read
(:meth:`AppSpec.from_dict`): nothing downstream re-applies a default. The spec as JSON — its
schema, merge patches and diffs, what agents read and write — stays in
:mod:`appdeck.model.specs`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from appdeck.model import specs

RuntimeKind = Literal["python", "node", "static", "command"]
"""How an app is built and run."""
Strategy = Literal["recreate", "rolling", "blue_green", "canary"]


@dataclass(frozen=True, slots=True)
class HealthCheck:
    path: str = "/"
    timeout_s: float = 5.0


@dataclass(frozen=True, slots=True)
class Canary:
    percent: int = 10
    steps: tuple[int, ...] = (10, 50, 100)
    analysis_window_s: float = 30.0
    max_error_rate: float = 0.05

    def plan(self) -> list[int]:
        """The traffic shares the canary goes through, ascending, 100 last."""
        return sorted({self.percent, *self.steps})


@dataclass(frozen=True, slots=True)
class Resources:
    """Limits of each instance: memory in MiB (swap included), CPUs, processes; and of the
    app's disk (its workspace, data and ``/tmp`` in all, MiB)."""

    memory_mb: int = 512
    cpus: float = 1.0
    pids: int = 256
    disk_mb: int = specs.DEFAULT_DISK_MB


@dataclass(frozen=True, slots=True)
class AppSpec:
    """How an app is built, run, checked and rolled out (see ``specs.SPEC_SCHEMA``)."""

    runtime: RuntimeKind = "python"
    source_path: str | None = None
    build_command: str | None = None
    run_command: str | None = None
    port: int | None = None
    health_check: HealthCheck = field(default_factory=HealthCheck)
    instances: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    default_strategy: Strategy = "rolling"
    canary: Canary = field(default_factory=Canary)
    resources: Resources = field(default_factory=Resources)
    outbound: bool = False
    """``network.outbound``: may reach public addresses (builds always may)."""
    build_timeout_s: float = 600.0
    ci_secrets: bool = False
    """``ci.secrets``: CI runs and builds get the app's secret env vars too."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AppSpec:
        """A stored or validated spec dict, with the defaults of ``specs.DEFAULTS`` under it
        (a spec stored before a field existed gets that field's default, here and only here).
        """
        full = specs.merge(specs.DEFAULTS, dict(data))
        health = full.get("health_check") or {}
        canary = full.get("canary") or {}
        resources = full.get("resources") or {}
        return cls(
            runtime=cast(RuntimeKind, full["runtime"]),
            source_path=full.get("source_path"),
            build_command=full.get("build_command"),
            run_command=full.get("run_command"),
            port=full.get("port"),
            health_check=HealthCheck(str(health["path"]), float(health["timeout_s"])),
            instances=int(full["instances"]),
            env=dict(full.get("env") or {}),
            default_strategy=cast(Strategy, full["default_strategy"]),
            canary=Canary(
                percent=int(canary["percent"]),
                steps=tuple(int(s) for s in canary["steps"]),
                analysis_window_s=float(canary["analysis_window_s"]),
                max_error_rate=float(canary["max_error_rate"]),
            ),
            resources=Resources(
                memory_mb=int(resources["memory_mb"]),
                cpus=float(resources["cpus"]),
                pids=int(resources["pids"]),
                disk_mb=int(resources["disk_mb"]),
            ),
            outbound=bool((full.get("network") or {}).get("outbound", False)),
            build_timeout_s=float(full.get("build_timeout_s", 600.0)),
            ci_secrets=bool((full.get("ci") or {}).get("secrets", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON (what :meth:`from_dict` reads back)."""
        data = asdict(self)
        data["env"] = dict(self.env)
        data["canary"]["steps"] = list(self.canary.steps)
        data["network"] = {"outbound": data.pop("outbound")}
        data["ci"] = {"secrets": data.pop("ci_secrets")}
        return copy.deepcopy(data)


@dataclass(frozen=True, slots=True)
class Release:
    """One deployment of one app: its frozen spec, env and source, and where it is routed.

    ``route`` is the app's route key (:func:`appdeck.model.hostnames.route_label`,
    ``<app>--<tenant>``): the router routes, counts and marks by it, never by ``app_name``,
    which is unique only within a tenant. ``source_path`` is the directory checked when the
    deployment was made (links resolved), which the runtime opens without following links.
    """

    app_id: int
    app_name: str
    number: int
    spec: AppSpec
    env: Mapping[str, str] = field(default_factory=dict)
    route: str = ""
    source_path: Path = Path("/nonexistent")
    secret_names: frozenset[str] = frozenset()
    """Names in ``env`` that are secret: builds go without them unless ``spec.ci_secrets``."""

    @property
    def release_id(self) -> str:
        """Unique over the platform: ``"<app_id>-<number>"``."""
        return f"{self.app_id}-{self.number}"

    @property
    def build_env(self) -> Mapping[str, str]:
        """What of ``env`` its build steps get: no secret unless the spec asks."""
        if self.spec.ci_secrets or not self.secret_names:
            return self.env
        return {n: v for n, v in self.env.items() if n not in self.secret_names}
