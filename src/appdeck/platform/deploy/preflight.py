"""Preflight: is an app ready to deploy? The same checks a deploy makes, answered as a list
(pass, warn or fail, each with a hint) instead of a refusal, so an agent can fix them all at
once. Read-only: nothing is built, started or written.

The checks, in order: the spec, the source (in the tenant's roots, a directory), the
runtime's binary on the server, the run command, the port (only when apps share the
server's network: a sandboxed instance has a loopback of its own), the build command, the
env vars the caller says the app needs, and a pending restart.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from appdeck.common.errors import InvalidArgument
from appdeck.common.identity import Principal
from appdeck.platform.apps import AppService
from appdeck.platform.env import EnvService

Status = Literal["pass", "warn", "fail"]
Verdict = Status

BINARIES: Final = {"python": "python3", "node": "node", "static": "python3"}
"""What each runtime runs on the server (``command`` brings its own)."""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    hint: str | None = None


@dataclass(frozen=True, slots=True)
class Preflight:
    app_id: int
    app_name: str
    checks: tuple[Check, ...]

    @property
    def verdict(self) -> Verdict:
        """The worst status of any check."""
        found = {c.status for c in self.checks}
        return "fail" if "fail" in found else ("warn" if "warn" in found else "pass")


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on the server's loopback right now."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class PreflightService:
    apps: AppService
    env: EnvService
    sandboxed: bool
    """Instances run in network namespaces of their own: a fixed port cannot clash."""
    which: Callable[[str], str | None] = field(default=shutil.which)
    port_free: Callable[[int], bool] = field(default=port_free)
    repository: Callable[[int], Awaitable[str | None]] | None = None
    """The app's connected repository URL, if any (``RepoSources.url``, given when built):
    a connected repository is the app's source, whatever spec.source_path says."""

    async def check(
        self, principal: Principal, app_id: int, required_env: Iterable[str] = ()
    ) -> Preflight:
        view = await self.apps.load(principal, app_id, "deploy.read")
        app = view.app
        spec = app.spec
        checks = [
            Check("spec", "pass", f"valid (version {app.spec_version})"),
            await self._repository_or_source(app.id, app.tenant_id, spec.get("source_path")),
            self._runtime(str(spec.get("runtime", "python"))),
            _run_command(spec),
            self._port(spec.get("port")),
            _build_command(spec),
        ]
        have = {e["name"] for e in await self.env.list_vars(principal, app_id)}
        missing = [n for n in required_env if n not in have]
        if missing:
            checks.append(Check("env", "fail", f"missing: {', '.join(missing)}", "env_vars set"))
        else:
            checks.append(Check("env", "pass", f"{len(have)} env var(s) set"))
        if app.needs_restart:
            checks.append(
                Check(
                    "restart",
                    "warn",
                    "env changed since the last deploy",
                    "deploy_app or restart_app",
                )
            )
        return Preflight(app.id, app.name, tuple(checks))

    async def _repository_or_source(self, app_id: int, tenant: str, source: Any) -> Check:
        url = await self.repository(app_id) if self.repository is not None else None
        if url is not None:
            return Check("source", "pass", f"the connected repository {url}")
        return self._source(tenant, source)

    def _source(self, tenant: str, source: Any) -> Check:
        if not source:
            return Check("source", "fail", "no source_path", "set_app_spec with spec.source_path")
        try:
            self.apps.sources.check(tenant, source)  # the rule a deploy applies, links resolved
        except InvalidArgument as exc:
            return Check("source", "fail", exc.message, exc.hint or "check the path")
        return Check("source", "pass", str(source))

    def _runtime(self, runtime: str) -> Check:
        binary = BINARIES.get(runtime)
        if binary is None:
            return Check("runtime", "pass", runtime)
        found = self.which(binary)
        if found is None:
            return Check("runtime", "fail", f"{binary} is not installed on the server")
        return Check("runtime", "pass", f"{runtime} ({found})")

    def _port(self, port: Any) -> Check:
        if not port:
            return Check("port", "pass", "picked by the platform per instance (PORT)")
        if self.sandboxed:
            return Check("port", "pass", f"{port} inside the app's own network namespace")
        if self.port_free(int(port)):
            return Check("port", "pass", f"{port} is free")
        return Check(
            "port", "fail", f"port {port} is in use", "set port to null: the platform picks one"
        )


def _run_command(spec: dict[str, Any]) -> Check:
    if spec.get("runtime", "python") != "static" and not spec.get("run_command"):
        return Check("run_command", "fail", "no run_command", "set_app_spec with spec.run_command")
    return Check("run_command", "pass", spec.get("run_command") or "static files")


def _build_command(spec: dict[str, Any]) -> Check:
    command = spec.get("build_command")
    if command:
        return Check("build_command", "pass", command)
    return Check(
        "build_command", "pass", "none: dependencies are installed, the source is used as is"
    )
