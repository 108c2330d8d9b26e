"""deploy_app_safely and debug_failed_deploy."""

from __future__ import annotations

import json
from typing import Any

from appdeck.platform.deploy import states
from appdeck.platform.services import Platform
from appdeck.prompts.arguments import STRATEGIES, choice
from appdeck.prompts.arguments import app_id as _app_id
from appdeck.prompts.arguments import user as _user
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import PromptArgument, PromptDef, Registry

JsonObject = dict[str, Any]


def register(registry: Registry, platform: Platform) -> None:
    apps, deployments = platform.apps, platform.deployments

    async def deploy_safely(args: dict[str, str], ctx: ToolContext) -> JsonObject:
        view = await apps.get(ctx.principal, _app_id(args))
        strategy = choice(args, "strategy", STRATEGIES, None) or view.app.spec.get(
            "default_strategy", "rolling"
        )
        live = await deployments.live(ctx.principal, view.app.id)
        text = (
            f"Deploy the app {view.app.name} (id {view.app.id}) safely with the {strategy} strategy.\n"
            f"Live now: {'deployment #' + str(live.record.number) if live else 'nothing (first deploy)'}.\n"
            "Steps:\n"
            "1. Call preflight_check; fix every 'fail' (set_app_spec, env_vars) before going on.\n"
            "2. Read appdeck://apps/{id}/spec and confirm the health_check path answers 200.\n"
            f"3. Call deploy_app with strategy {strategy!r} as a task (arguments.task) and follow "
            "its progress; subscribe to appdeck://apps/{id}/deployments for state changes.\n"
            "4. When live, call get_app_url and check the app answers.\n"
            "5. If it failed or was rolled back, call tail_deploy_logs (kind build, then runtime) "
            "and explain the cause; rollback_deploy restores the previous release if needed."
        ).replace("{id}", str(view.app.id))
        return {"description": f"Deploy {view.app.name} safely", "messages": [_user(text)]}

    async def debug_failed(args: dict[str, str], ctx: ToolContext) -> JsonObject:
        app_id = _app_id(args)
        view = await apps.get(ctx.principal, app_id)
        records = [d.record for d in await deployments.list(ctx.principal, app_id, limit=10)]
        if args.get("number"):
            records = [r for r in records if str(r.number) == args["number"]] or records
        failed = next((r for r in records if r.state in (states.FAILED, states.ROLLED_BACK)), None)
        if failed is None:
            return {
                "description": f"No failed deployment of {view.app.name}",
                "messages": [
                    _user(
                        f"The recent deployments of {view.app.name} did not fail. "
                        "Call list_deployments to see them."
                    )
                ],
            }
        steps = json.dumps(failed.steps[-10:], indent=1)
        text = (
            f"Deployment #{failed.number} of {view.app.name} ended {failed.state}: "
            f"{failed.status_message}\nIts last steps:\n{steps}\n"
            "Find the cause: call tail_deploy_logs with number "
            f"{failed.number} and kind build, then kind runtime (grep for Error or Traceback); "
            "compare its spec (appdeck://apps/{id}/spec) with the live one; check env_vars. "
            "Propose the smallest fix, apply it with set_app_spec or env_vars, run preflight_check, "
            "then deploy again."
        ).replace("{id}", str(app_id))
        return {"description": f"Debug deployment #{failed.number}", "messages": [_user(text)]}

    registry.add_prompt(
        PromptDef(
            "deploy_app_safely",
            deploy_safely,
            title="Deploy an app safely",
            description="Preflight, deploy as a task with a safe strategy, verify, roll back if needed.",
            arguments=[
                PromptArgument("app_id", "The app's id", required=True),
                PromptArgument("strategy", "recreate, rolling, blue_green or canary"),
            ],
            scope="deploy:write",
        )
    )
    registry.add_prompt(
        PromptDef(
            "debug_failed_deploy",
            debug_failed,
            title="Debug a failed deployment",
            description="Walk through the logs and state of the latest failed or rolled-back deploy.",
            arguments=[
                PromptArgument("app_id", "The app's id", required=True),
                PromptArgument("number", "A deployment number (default: the latest failed one)"),
            ],
            scope="deploy:read",
        )
    )
