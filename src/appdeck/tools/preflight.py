"""preflight_check: an adapter over the platform's PreflightService."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from appdeck.tools.kit import READS, AppId, Arguments, Call, Output, Reply, Tool

preflight_check = Tool(
    "preflight_check",
    title="Preflight check",
    description="Check an app is ready to deploy, before deploy_app: spec, source, runtime, "
    "build and run commands, port, env vars (pass the names it needs as required_env), a "
    "pending restart. Returns a verdict (pass, warn or fail) and every check with a hint; fix "
    "each fail (set_app_spec, env_vars) and check again.",
    scope="deploy:read",
    hints=READS,
)


class PreflightCheck(Arguments):
    app_id: AppId
    required_env: list[str] = Field(default_factory=list, max_length=100)


class CheckResult(Output):
    check: str
    status: Literal["pass", "warn", "fail"]
    detail: str
    hint: str | None = None


class PreflightResult(Output):
    app_id: int
    verdict: Literal["pass", "warn", "fail"]
    checks: list[CheckResult]


@preflight_check.handles(PreflightCheck, PreflightResult)
async def _preflight(args: PreflightCheck, call: Call) -> Reply:
    found = await call.platform.preflight.check(call.principal, args.app_id, args.required_env)
    checks = []
    for c in found.checks:
        item = CheckResult(check=c.name, status=c.status, detail=c.detail)
        if c.hint:
            item.hint = c.hint
        checks.append(item)
    data = PreflightResult(app_id=found.app_id, verdict=found.verdict, checks=checks)
    return Reply(f"Preflight {found.verdict} for {found.app_name}", data)


TOOLS = (preflight_check,)
