"""``appdeck app list|status|logs|stop|start``: the operator's view of the apps on this host.

These commands work on the data dir and the database, like ``appdeck token``, beside a
running server or without one. ``stop`` and ``start`` never touch an app's processes
themselves (a running server supervises them: two supervisors would fight): they record the
intent in the database (``apps.run_intent``) and the server applies it on its next deploy
watch (every few seconds), or at its next start; ``app list`` shows it pending until then.
``logs`` reads the app's runtime log as the server wrote it (the app's own output: data,
printed as such), with the values of its release's secrets masked.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from appdeck.cli.admin import AsJson, DataDir, _database, _emit, _run, _settings, console
from appdeck.common.errors import FailedPrecondition, InvalidArgument, NotFound

app = typer.Typer(
    help="The apps on this host: list, status, logs, stop, start.", no_args_is_help=True
)

AppRef = Annotated[str, typer.Argument(help="The app: its id, or its name with --tenant.")]
Tenant = Annotated[str | None, typer.Option("--tenant", help="The app's tenant (with a name).")]


async def _open(data_dir: Path | None) -> tuple[Any, Any]:
    from appdeck.storage import Storage

    settings = _settings(data_dir)
    return settings, await Storage.open(_database(settings))


async def _find(storage: Any, ref: str, tenant: str | None) -> Any:
    from appdeck.storage.apps import AppStore

    store = AppStore(storage.engine)
    if ref.isdigit():
        found = await store.get(int(ref))
    elif tenant is None:
        raise InvalidArgument("name an app by its id, or by its name with --tenant")
    else:
        found = await store.by_name(tenant, ref)
    if found is None or (tenant is not None and found.tenant_id != tenant):
        raise NotFound(f"no app {ref}" + (f" in tenant {tenant}" if tenant else ""))
    return found


async def _live(storage: Any, app_id: int) -> Any:
    from appdeck.storage.deployments import DeploymentStore

    deployments = DeploymentStore(storage.engine)
    found = await deployments.for_app(app_id, states=["live"], limit=1)
    return found[0] if found else None


def _state(record: Any, live: Any) -> str:
    if record.run_intent:
        return f"{record.run_intent} pending"
    if record.stopped:
        return "stopped"
    return "running" if live is not None else "not deployed"


@app.command("list")
def app_list(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Every app of every tenant: its live release and whether it runs."""

    async def go() -> list[dict[str, Any]]:
        from appdeck.storage.apps import AppStore

        _, storage = await _open(data_dir)
        try:
            rows = []
            for record in await AppStore(storage.engine).all_apps():
                live = await _live(storage, record.id)
                rows.append(
                    {
                        "app_id": record.id,
                        "tenant": record.tenant_id,
                        "name": record.name,
                        "live": None if live is None else live.number,
                        "instances": None if live is None else live.spec.get("instances", 1),
                        "state": _state(record, live),
                    }
                )
            return rows
        finally:
            await storage.close()

    rows = _run(go)
    if as_json:
        typer.echo(json.dumps({"apps": rows}))
        return
    table = Table("id", "tenant", "name", "live", "instances", "state")
    for row in rows:
        cells = [row["app_id"], row["tenant"], row["name"], row["live"], row["instances"]]
        table.add_row(*(escape(str("-" if c is None else c)) for c in cells), row["state"])
    console.print(table)


def _intent(ref: str, tenant: str | None, data_dir: Path | None, intent: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        from appdeck.storage.apps import AppStore

        _, storage = await _open(data_dir)
        try:
            record = await _find(storage, ref, tenant)
            if await _live(storage, record.id) is None:
                raise FailedPrecondition(
                    f"app {record.id} has no live release: nothing to {intent}"
                )
            await AppStore(storage.engine).update(record.id, run_intent=intent)
            return {"app_id": record.id, "name": record.name, "intent": intent}
        finally:
            await storage.close()

    return _run(go)


@app.command("stop")
def app_stop(
    ref: AppRef, tenant: Tenant = None, data_dir: DataDir = None, as_json: AsJson = False
) -> None:
    """Stop an app (0 instances, its URL answers 503 "stopped"; its data is kept)."""
    done = _intent(ref, tenant, data_dir, "stop")
    _emit(
        as_json, done, f"Stop of app {done['app_id']} ({escape(done['name'])}) recorded: " + _WHEN
    )


@app.command("start")
def app_start(
    ref: AppRef, tenant: Tenant = None, data_dir: DataDir = None, as_json: AsJson = False
) -> None:
    """Start a stopped app's live release again."""
    done = _intent(ref, tenant, data_dir, "start")
    _emit(
        as_json, done, f"Start of app {done['app_id']} ({escape(done['name'])}) recorded: " + _WHEN
    )


_WHEN = "the server applies it within a few seconds (or when it next starts); `appdeck app list`"


@app.command("logs")
def app_logs(
    ref: AppRef,
    tenant: Tenant = None,
    lines: Annotated[int, typer.Option("-n", "--lines", help="How many lines.", min=1)] = 100,
    number: Annotated[
        int | None, typer.Option(help="A deployment (default: the live one).")
    ] = None,
    kind: Annotated[str, typer.Option(help="runtime or build.")] = "runtime",
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """The newest lines of an app's log (its own output, secrets masked)."""
    if kind not in ("runtime", "build"):
        raise typer.BadParameter("kind is runtime or build")

    async def go() -> dict[str, Any]:
        from appdeck.storage.deployments import DeploymentStore

        settings, storage = await _open(data_dir)
        try:
            record = await _find(storage, ref, tenant)
            store = DeploymentStore(storage.engine)
            chosen = await (store.get(record.id, number) if number else _live(storage, record.id))
            if chosen is None:
                raise NotFound(f"app {record.id} has no such deployment")
            text = await asyncio.to_thread(_read, settings, chosen, kind, min(lines, 1000))
            return {"app_id": record.id, "number": chosen.number, "kind": kind, "lines": text}
        finally:
            await storage.close()

    done = _run(go)
    if as_json:
        typer.echo(json.dumps(done))
        return
    console.print(
        f"[dim]app {done['app_id']} #{done['number']} {kind} log (the app's output)[/dim]"
    )
    for line in done["lines"]:
        console.print(escape(line), highlight=False, markup=False)


def _read(settings: Any, record: Any, kind: str, limit: int) -> list[str]:
    from appdeck.platform.crypto import Sealer
    from appdeck.platform.env import thaw
    from appdeck.platform.logs import Masker
    from appdeck.runtime.logs import read_page

    runtime = Path(settings.data_dir) / "runtime"
    found = sorted(runtime.glob(f"apps/*/releases/{record.release_id}/{kind}.log"))
    if not found:
        return []
    page = read_page(found[0], None, limit, None)
    sealer = Sealer.from_settings(settings.secret_key, Path(settings.data_dir))
    frozen, _ = thaw(sealer.open(record.env))
    defaults = record.spec.get("env") or {}
    masker = Masker([(n, v) for n, v in frozen.items() if defaults.get(n) != v])
    return [masker(line.text) for line in page.lines]


@app.command("status")
def app_status(
    ref: AppRef, tenant: Tenant = None, data_dir: DataDir = None, as_json: AsJson = False
) -> None:
    """An app's health: its live release, instances up/desired, each instance's state,
    restarts, last exit, OOM kills, memory and CPU, its disk against its quota."""

    async def go() -> dict[str, Any]:
        settings, storage = await _open(data_dir)
        try:
            record = await _find(storage, ref, tenant)
            live = await _live(storage, record.id)
            return _health(settings, record, live)
        finally:
            await storage.close()

    done = _run(go)
    if as_json:
        typer.echo(json.dumps(done))
        return
    _print_health(done)


def _health(settings: Any, record: Any, live: Any) -> dict[str, Any]:
    """The health service's facts, from the data dir: the runtime's records of the live
    release and the instances' cgroups. The traffic counters are in the server's memory:
    its ``/metrics`` has them (``appdeck_app_http_*``)."""
    from appdeck.platform.health import health_of
    from appdeck.platform.traffic import Traffic
    from appdeck.runtime.inspection import RecordedInstances, host_cgroups

    data = Path(settings.data_dir)
    runtime = RecordedInstances(
        data / "runtime", host_cgroups(_cgroup_name(settings, data)), data / "disks"
    )
    health = health_of(record, live, runtime, Traffic(0.0, 0, 0, None))
    body = health.public()
    body["traffic"] = None  # not known here (see the docstring)
    if live is not None and live.release_id in runtime.unhealthy and body["state"] != "stopped":
        body["state"] = "crash_loop"  # a given-up instance leaves no record behind
    body["name"] = record.name
    body["tenant"] = record.tenant_id
    return body


def _cgroup_name(settings: Any, data: Path) -> str:
    """The install's cgroup (``APPDECK_SANDBOX_CGROUP``, else ``install.json``'s)."""
    if settings.sandbox_cgroup:
        return str(settings.sandbox_cgroup)
    try:
        found = json.loads((data / "install.json").read_text())
    except (OSError, ValueError):
        return "appdeck"
    name = found.get("cgroup") if isinstance(found, dict) else None
    if isinstance(name, str) and name:
        return name
    ident = found.get("id") if isinstance(found, dict) else None
    return f"appdeck/{ident}" if isinstance(ident, str) and ident else "appdeck"


def _print_health(done: dict[str, Any]) -> None:
    live = done["live"]
    head = f"app {done['app_id']} ({escape(done['name'])}, tenant {escape(done['tenant'])})"
    if live is None:
        console.print(f"{head}: {done['state']}", highlight=False)
        return
    count = done["instances"]
    console.print(
        f"{head}: {done['state']}, release #{live['number']} ({live['strategy']}), "
        f"{count['up']}/{count['desired']} instance(s) up",
        highlight=False,
    )
    table = Table("instance", "state", "restarts", "last exit", "OOM kills", "memory", "CPU s")
    for item in done["instance_details"]:
        memory = item["memory_bytes"]
        table.add_row(
            str(item["index"]),
            item["state"],
            str(item["restarts"]),
            item["last_exit"] or "-",
            str(item["oom_kills"]),
            "-" if memory is None else f"{memory / 1024 / 1024:.1f} MiB",
            "-" if item["cpu_seconds"] is None else f"{item['cpu_seconds']:.2f}",
        )
    console.print(table)
    disk = done["disk"]
    if disk is not None:
        console.print(
            f"disk: {disk['used_bytes'] / 1024 / 1024:.1f} MiB of "
            f"{disk['quota_bytes'] / 1024 / 1024:.0f} MiB",
            highlight=False,
        )
