"""register_app, list_my_apps, get_app_url, set_app_spec: adapters over AppService."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from appdeck.model import specs
from appdeck.platform.apps import APP_NAME
from appdeck.tools.kit import READS, AppId, Arguments, Call, Hints, Output, Reply, Tool, paginate
from appdeck.tools.results import AppDetail, AppSummary, HealthBrief

FullSpec = Annotated[dict[str, Any], WithJsonSchema(specs.full_schema())]
SpecPatch = Annotated[dict[str, Any], WithJsonSchema(specs.patch_schema())]

register_app = Tool(
    "register_app",
    title="Register an app",
    description="Register a new app, the first step for anything new: a name unique in your "
    "tenant (it is served at <name>--<tenant>.localhost) and optionally its spec (runtime, "
    "source_path, build and run commands, health check, instances, default strategy, canary "
    "settings). You become its owner. Returns the app with its id, URL and complete spec. "
    "Next: set_app_spec (if the spec is incomplete), env_vars, preflight_check, deploy_app.",
    scope="apps:write",
    hints=Hints(read_only=False),
)


class RegisterApp(Arguments):
    name: str = Field(
        pattern=f"^{APP_NAME.pattern}$",  # JSON Schema searches: anchor it
        description=(
            "Lower-case letters, digits and dashes, 1 to 40 characters, starting and ending with "
            "a letter or digit."
        ),
    )
    spec: FullSpec | None = None
    description: str | None = Field(default=None, max_length=2000)


@register_app.handles(RegisterApp, AppDetail)
async def _register(args: RegisterApp, call: Call) -> Reply:
    view = await call.platform.apps.register(call.principal, args.name, args.spec, args.description)
    return Reply(
        f"Registered app {view.app.name} (id {view.app.id}); it will be served at {view.url} "
        "once deployed. Next: set_app_spec, env_vars, preflight_check, deploy_app.",
        AppDetail.model_validate(view.detail()),
    )


list_my_apps = Tool(
    "list_my_apps",
    title="List my apps",
    description="List the apps you can use, with your role on each, their URLs and health "
    "(state, instances up/desired, restarts); use it to find an app_id. Paginated: pass "
    "next_cursor back as cursor for the next page. Next: manage_app get for one app's "
    "details, list_deployments for its deployments.",
    scope="apps:read",
    hints=READS,
)


class ListMyApps(Arguments):
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")
    limit: int = Field(default=50, ge=1, le=100)
    name_contains: str | None = Field(default=None, max_length=64)


class ListedApp(AppSummary):
    health: HealthBrief


class AppList(Output):
    apps: list[ListedApp]
    next_cursor: str | None = Field(default=None, description="Present when there is more.")


@list_my_apps.handles(ListMyApps, AppList)
async def _list(args: ListMyApps, call: Call) -> Reply:
    async def fetch(offset: int, limit: int) -> list[Any]:
        return await call.platform.apps.list_apps(
            call.principal, offset=offset, limit=limit, name_contains=args.name_contains
        )

    page = await paginate(fetch, args.cursor, args.limit)
    health = await call.platform.health.briefs([v.app for v in page.items])
    data = AppList(
        apps=[
            ListedApp.model_validate({**v.summary(), "health": health[v.app.id].brief()})
            for v in page.items
        ]
    )
    if page.next_cursor:
        data.next_cursor = page.next_cursor
    names = ", ".join(v.app.name for v in page.items) or "none"
    return Reply(f"{len(page.items)} app(s): {names}", data)


get_app_url = Tool(
    "get_app_url",
    title="Get an app's URL",
    description="The URLs the ingress serves the app at, the public one first "
    "(https://<name>--<tenant>.<apps domain>/ when the operator set one; always "
    "http://<name>--<tenant>.localhost:<port>/; tls: the public URL's certificate state), "
    "and each custom domain of its spec (domains) with its state: verified (served, with its "
    "tls state), pending (create the DNS TXT record shown, then call again with verify: true) "
    "or refused (the reason). It answers 404 until a first deploy goes live (to a stranger, a "
    "never-deployed app is no app) and 503 while its live release is down.",
    scope="apps:read",
    # not read-only: verify: true claims the domains (writes); claiming twice changes nothing
    hints=Hints(read_only=False, idempotent=True),
)


class GetAppUrl(Arguments):
    app_id: AppId
    verify: bool = Field(
        default=False,
        description="Claim the spec's custom domains and look their TXT records up now "
        "(needs the right to change the app's spec); they are also looked up periodically.",
    )


class TxtRecord(Output):
    name: str = Field(description="Where to create the TXT record.")
    value: str


class DomainState(Output):
    host: str
    state: Literal["verified", "pending", "refused"]
    url: str | None = None
    method: str | None = Field(default=None, description="How it was proved: txt or acme.")
    tls: dict[str, Any] | None = Field(default=None, description="Its certificate, if any.")
    txt: TxtRecord | None = Field(default=None, description="The record that proves control.")
    reason: str | None = Field(default=None, description="Why it is refused.")
    last_check: str | None = Field(default=None, description="What the last lookup found.")


class AppUrl(Output):
    app_id: int
    name: str
    url: str = Field(description="The URL to use: the public one when there is one.")
    urls: list[str] = Field(default_factory=list, description="Every URL, the public first.")
    domains: list[DomainState] = Field(default_factory=list)
    tls: dict[str, Any] | None = Field(
        default=None,
        description="The public URL's certificate: state (pending, issuing, issued, renewing, "
        "failed, expired), live, not_after, renew_at, error, next_try; null when none is known.",
    )


@get_app_url.handles(GetAppUrl, AppUrl)
async def _url(args: GetAppUrl, call: Call) -> Reply:
    action = "spec.write" if args.verify else "app.read"
    view = await call.platform.apps.load(call.principal, args.app_id, action)
    app = view.app
    states = await call.platform.domains.describe(app, verify=args.verify)
    urls = call.platform.domains.urls
    public = urls.public_host(app.name, app.tenant_id)
    data = AppUrl(
        app_id=app.id,
        name=app.name,
        url=view.url,
        urls=urls.all(app.name, app.tenant_id),
        domains=[DomainState.model_validate(s) for s in states],
        tls=urls.tls.status_of(public) if public is not None else None,
    )
    text = f"{app.name} is served at {view.url}"
    if states:
        text += "; domains: " + ", ".join(f"{s['host']} {s['state']}" for s in states)
    return Reply(text, data)


set_app_spec = Tool(
    "set_app_spec",
    title="Set an app's spec",
    description="Change how an app is built, run, checked and rolled out. mode merge (default) "
    "applies a JSON merge patch (null resets a field), replace sets the whole spec. Returns "
    "the diff and the complete spec; dry_run: true only shows the diff. A change applies at "
    "the next deploy_app (run preflight_check first). resources and instances are bounded by "
    "the operator's ceilings (invalid_argument) and your tenant's quotas (quota_exceeded, "
    "saying what your other apps hold); ci.secrets needs the admin role.",
    scope="apps:write",
    hints=Hints(read_only=False, idempotent=True),
)


class SetAppSpec(Arguments):
    app_id: AppId
    spec: SpecPatch
    mode: Literal["merge", "replace"] = "merge"
    dry_run: bool = False


class SpecChanged(Output):
    app_id: int
    spec: dict[str, Any]
    spec_version: int
    diff: list[dict[str, Any]] = Field(description="Each change as {path, from, to}.")
    changed: bool
    dry_run: bool


@set_app_spec.handles(SetAppSpec, SpecChanged)
async def _set_spec(args: SetAppSpec, call: Call) -> Reply:
    view, changes = await call.platform.apps.set_spec(
        call.principal,
        args.app_id,
        args.spec,
        replace=args.mode == "replace",
        dry_run=args.dry_run,
    )
    data = SpecChanged(
        app_id=view.app.id,
        spec=view.app.spec,
        spec_version=view.app.spec_version,
        diff=changes,
        changed=bool(changes),
        dry_run=args.dry_run,
    )
    verb = "Would change" if args.dry_run else "Changed"
    name = view.app.name
    summary = f"{verb} {len(changes)} field(s) of {name}'s spec" if changes else "No change"
    return Reply(summary, data)


TOOLS = (register_app, list_my_apps, get_app_url, set_app_spec)
