"""The Kubernetes driver (issue 25 §2): releases as Deployments, on ``kubernetes-asyncio``.

It implements :class:`appdeck.runtime.driver.Driver` (docs/runtime-seam.md §2.1) with a
Deployment per release whose ``replicas`` is the spec's ``instances``: Kubernetes, not the
driver, starts, restarts and places the pods, so the driver cannot stop or restart one index
(``indexed_instances`` and ``in_place_restart`` are False) and an instance's upstream is the
release's Service (``<service>.<namespace>.svc:80``), which the gateway reaches through the
app's HTTPRoute (:mod:`.router`), never through AppDeck's data plane.

==================  ====================================================================
``prepare``         nothing on the cluster: AppDeck builds the workspace; the pod fetches it
``start``           create the release's objects in order (create, then merge-patch on 409),
                    then patch the Secrets' ``ownerReferences`` with the Deployment's uid
``wait_ready``      list the release's pods until ``index + 1`` are Ready; else the why
``gave_up``         a pod in CrashLoopBackOff with ``GIVE_UP_RESTARTS`` restarts (sticky)
``running``         the release's Ready pods, by label (adoption after a restart)
``recover``         the Deployment by label: there (adopted) or not (every index dead)
``stop``            delete the Deployment, Service, Secrets (one replica fewer with an index)
``remove``          delete every object of the release, by label
``remove_app``      delete the app's NetworkPolicy and HTTPRoute, and any release left
``inspect``         the last pods read (cheap, sync); :meth:`refresh` reads them all
``events``          restarts, OOM kills, gave-up, from differences between two reads
``logs``/``follow`` ``pods/log?timestamps=true``; the cursor is ``sinceTime`` in ns
==================  ====================================================================

**Create, then merge-patch on 409, not server-side apply.** The first deploy of a release is
the common path and costs one POST per object; a re-apply (a retried start, another replica)
costs a POST answered 409 and a merge patch. Server-side apply would be one PATCH either way
and would track field ownership, but the API-conversation tests' server (kmock 0.8) emulates
neither (a PATCH to a missing object is 404 and no managed fields are kept), so the tests
would prove nothing of it; a move to it belongs with ``make k8s-e2e`` against a real cluster.
The Secrets are immutable and the release's own: on 409 they are left as they are.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from appdeck.common.types import JsonObject
from appdeck.model.release import Release
from appdeck.runtime.driver import (
    Adoption,
    Capabilities,
    DiskUsage,
    Driver,
    Instance,
    InstanceEvent,
    InstanceEventKind,
    InstanceStatus,
    InstanceWatcher,
    LogKind,
    LogLine,
    LogPage,
    Readiness,
)
from appdeck.runtime.kubernetes import names, status
from appdeck.runtime.kubernetes.api import MERGE_PATCH, KubeApi, KubeError, named, path_of
from appdeck.runtime.kubernetes.limits import ClusterLimits
from appdeck.runtime.kubernetes.manifests import SERVICE_PORT, owner_reference, render

log = logging.getLogger("appdeck.runtime.kubernetes")

CAPABILITIES: Final = Capabilities(
    own_network=True,
    namespaced_upstreams=False,
    host_processes=False,
    in_place_restart=False,
    indexed_instances=False,
    driver_grep=False,
    app_disks=False,
)
"""docs/runtime-seam.md §2.2, the Kubernetes column."""
POLL_S: Final = 0.5
"""Between two reads of a release's pods while waiting for them (one list call each)."""
LOG_BYTES: Final = 1 << 20
"""``limitBytes`` of one ``pods/log`` read."""
_MANAGED: Final = {"app.kubernetes.io/managed-by": "appdeck"}
_TIMESTAMPED: Final = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z (.*)")

SourceTokens = Callable[[Release], str]
"""The bearer token a release's init container fetches its workspace with (the endpoint that
checks it is another lane's: ``/internal/releases/<id>/workspace.tar``)."""
Sleep = Callable[[float], Awaitable[None]]


@dataclass
class _Handle:
    """What the driver knows of a release it started or recovered (Nomad's DriverState)."""

    namespace: str
    service: str
    replicas: int
    release: Release | None = None


@dataclass
class _Seen:
    """A pod's restart count and state at the last read: events are the differences."""

    restarts: int = 0
    gave_up: bool = False


@dataclass
class _Cache:
    pods: dict[str, list[JsonObject]] = field(default_factory=dict)
    """release_id -> its pods at the last read, by name."""
    seen: dict[str, dict[str, _Seen]] = field(default_factory=dict)
    """release_id -> pod uid (or name) -> what the last read saw (only the pods it saw)."""


class KubernetesDriver:
    """One driver for every app of the platform on one cluster."""

    def __init__(
        self,
        api: KubeApi,
        limits: ClusterLimits,
        tokens: SourceTokens,
        *,
        give_up_after: int = status.GIVE_UP_RESTARTS,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.limits = limits
        self.tokens = tokens
        self.give_up_after = give_up_after
        self._sleep = sleep
        self._clock = clock
        self._handles: dict[str, _Handle] = {}
        self._namespaces: set[str] = set()
        self._policies: set[str] = set()
        self._given_up: set[str] = set()
        self._cache = _Cache()
        self._watchers: list[InstanceWatcher] = []

    # -- the seam ----------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    async def prepare(self, release: Release, *, rebuild: bool = False) -> None:
        """Nothing on the cluster: the workspace is prepared by AppDeck and fetched by the pod
        (docs/kubernetes.md, "Source delivery")."""

    async def start(self, release: Release, index: int) -> Instance:
        """Create the release's objects (the first call for a release; the Deployment starts
        every instance), then give the instance its upstream: the release's Service. An index
        beyond the Deployment's ``replicas`` raises them to ``index + 1`` (a scale up, as
        ``stop`` with an index is one replica fewer): the engine scales both drivers by index."""
        handle = self._handles.get(release.release_id)
        if handle is None or handle.release is None:
            handle = await self._apply(release)
        elif index >= handle.replicas:
            handle.replicas = index + 1
            await self._patch_deployment(handle, {"spec": {"replicas": handle.replicas}})
        return Instance(release.release_id, index, _upstream(handle), self._clock())

    async def wait_ready(self, release: Release, instance: Instance, within_s: float) -> Readiness:
        """Poll the release's pods until ``instance.index + 1`` of them are Ready (the
        readiness probe is the app's health check), at most ``within_s``."""
        deadline = time.monotonic() + within_s
        path = release.spec.health_check.path
        while True:
            pods = await self._pods(release.release_id)
            if sum(status.ready(pod) for pod in pods) > instance.index:
                return Readiness(True, "ready")
            if any(status.gave_up(pod, self.give_up_after) for pod in pods):
                return Readiness(False, status.why_not_ready(pods, path))
            if time.monotonic() >= deadline:
                return Readiness(False, status.why_not_ready(pods, path))
            await self._sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    async def gave_up(self, release_id: str) -> bool:
        """Sticky until :meth:`remove`, as the local driver's crash loop."""
        if release_id not in self._given_up:
            await self._pods(release_id)
        return release_id in self._given_up

    async def stop(self, release_id: str, index: int | None = None, grace_s: float = 5.0) -> None:
        """All instances: delete the Deployment, the Service and the Secrets (the pods go after
        their ``terminationGracePeriodSeconds``, the pod spec's, not ``grace_s``: the garbage
        collector deletes them). The Secrets are owned by the Deployment, but a ``start`` of
        the same release soon after would find them still there (409, kept) and the collector
        could delete them before the new Deployment owns them: its pods would never start.
        One index: one replica fewer (which pod goes is the ReplicaSet's choice)."""
        handle = self._handles.get(release_id)
        if index is not None and handle is not None and handle.replicas > 1:
            handle.replicas -= 1
            await self._patch_deployment(handle, {"spec": {"replicas": handle.replicas}})
            return
        for kind in ("Deployment", "Service", "Secret"):
            for obj in await self.api.list(kind, _ns(handle), _release_labels(release_id)):
                await self.api.delete(obj)
        if handle is not None:
            handle.release = None  # a start applies again
        self._cache.pods.pop(release_id, None)
        self._cache.seen.pop(release_id, None)

    async def running(self, release_id: str) -> list[Instance]:
        """The release's Ready pods, by index (name order), read by label."""
        pods = [pod for pod in await self._pods(release_id) if status.ready(pod)]
        if not pods:
            return []
        handle = self._handles.get(release_id) or self._handle_of(pods[0])
        return [
            Instance(release_id, i, _upstream(handle), _started(pod, self._clock()))
            for i, pod in enumerate(pods)
        ]

    async def recover(self, release: Release) -> Adoption:
        """After a control-plane restart: the release's Deployment, found by label. If it is
        there, Kubernetes kept its pods running (and restarted them): every index is adopted.
        If not, every index is dead and the caller starts the release again."""
        rid = release.release_id
        namespace = names.namespace(_tenant(release), self.limits)
        found = await self.api.list("Deployment", namespace, _release_labels(rid))
        count = release.spec.instances
        if not found:
            self._handles.pop(rid, None)
            return Adoption(adopted=[], dead=list(range(count)))
        deployment = found[0]
        wanted = (deployment.get("spec") or {}).get("replicas")
        replicas = count if wanted is None else int(wanted)
        handle = _Handle(namespace, names.release_name(release, _tenant(release)), replicas)
        handle.release = release
        self._handles[rid] = handle
        now = self._clock()
        return Adoption(
            adopted=[Instance(rid, i, _upstream(handle), now) for i in range(replicas)], dead=[]
        )

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        """From the last read of the release's pods (no I/O: a metrics scrape calls it)."""
        pods = self._cache.pods.get(release_id, [])
        return [status.instance_status(i, pod) for i, pod in enumerate(pods)]

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        """No per-app disks on Kubernetes (``app_disks`` False)."""
        return None

    def events(self, watcher: InstanceWatcher) -> None:
        """Call ``watcher`` (on the loop, never awaited) for the restarts, OOM kills and
        give-ups that a read of pods shows (:meth:`refresh` reads every release's)."""
        self._watchers.append(watcher)

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage:
        """The app containers' output (``pods/log?timestamps=true``), oldest first. The cursor
        is the last line's timestamp in nanoseconds since the epoch; see :func:`_page`."""
        if kind == "build":
            return LogPage([], cursor or 0)  # the build runs in AppDeck, not on the cluster
        lines: list[LogLine] = []
        for index, pod in enumerate(await self._pods(release_id)):
            query = {"container": status.APP, "timestamps": "true", "limitBytes": str(LOG_BYTES)}
            if cursor is None:
                query["tailLines"] = str(limit)
            else:
                query["sinceTime"] = _since(cursor)
            meta = pod["metadata"]
            try:
                text = await self.api.text(
                    named("Pod", meta.get("namespace"), meta["name"]) + "/log", query
                )
            except KubeError as exc:
                if exc.status in (400, 404):  # not started yet, or gone
                    continue
                raise
            lines.extend(_parse(text, index))
        return _page(lines, cursor, limit, grep)

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage:
        """Like :meth:`logs` after ``cursor`` (None: from now on), polling until a line comes
        or ``timeout_s`` passes (``pods/log?follow=true`` would hold a connection per pod)."""
        after = cursor if cursor is not None else int(self._clock() * 1e9)
        deadline = time.monotonic() + timeout_s
        while True:
            page = await self.logs(release_id, kind, after, limit, grep)
            if page.lines or time.monotonic() >= deadline:
                return page
            await self._sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    async def releases(self) -> list[str]:
        """The releases with a Deployment managed by AppDeck, in every namespace."""
        found = await self.api.list("Deployment", None, _MANAGED)
        ids = {(d["metadata"].get("labels") or {}).get("appdeck.dev/release") for d in found}
        return sorted(i for i in ids if i)

    async def remove(self, release_id: str) -> None:
        """Every object of the release, by label (as :meth:`stop`: nothing else is kept on the
        cluster), and what the driver remembers of it (a give-up too)."""
        await self.stop(release_id)
        self._forget(release_id)

    async def remove_app(self, app_id: int) -> None:
        """The app's own objects (NetworkPolicy, HTTPRoute) and any release object left."""
        labels = {**_MANAGED, "appdeck.dev/app-id": str(app_id)}
        for kind in ("HTTPRoute", "NetworkPolicy", "Deployment", "Service", "Secret"):
            for obj in await self.api.list(kind, None, labels):
                await self.api.delete(obj)
                if kind == "NetworkPolicy":
                    self._policies.discard(path_of(obj))
        for rid in [r for r in self._handles if r.split("-")[0] == str(app_id)]:
            self._forget(rid)

    async def detach(self) -> None:
        """Nothing runs here: the pods keep running and a later driver recovers them."""
        self._handles.clear()

    # -- reads that feed inspect and events --------------------------------------------------
    async def refresh(self) -> None:
        """Read every AppDeck pod (one call) and update :meth:`inspect` and :meth:`events`:
        a server calls it every few seconds (``kube_setup.pod_reads``)."""
        pods = await self.api.list("Pod", None, _MANAGED)
        by_release: dict[str, list[JsonObject]] = {}
        for pod in pods:
            rid = (pod["metadata"].get("labels") or {}).get("appdeck.dev/release")
            if rid:
                by_release.setdefault(rid, []).append(pod)
        for rid in set(self._cache.pods) - set(by_release):  # no pod left: nothing to inspect
            self._cache.pods.pop(rid, None)
            self._cache.seen.pop(rid, None)
        for rid, found in by_release.items():
            self._remember(rid, found)

    async def _pods(self, release_id: str) -> list[JsonObject]:
        handle = self._handles.get(release_id)
        pods = await self.api.list("Pod", _ns(handle), _release_labels(release_id))
        return self._remember(release_id, pods)

    def _remember(self, release_id: str, pods: list[JsonObject]) -> list[JsonObject]:
        pods = sorted(pods, key=lambda p: str(p["metadata"].get("name")))
        self._cache.pods[release_id] = pods
        before = self._cache.seen.get(release_id, {})
        self._cache.seen[release_id] = {}
        for index, pod in enumerate(pods):
            self._diff(release_id, index, pod, before)
        return pods

    def _diff(self, release_id: str, index: int, pod: JsonObject, seen: dict[str, _Seen]) -> None:
        meta = pod["metadata"]
        key = str(meta.get("uid") or meta.get("name"))
        before = seen.get(key)
        now = _Seen(status.restarts(pod), status.gave_up(pod, self.give_up_after))
        self._cache.seen[release_id][key] = now
        if now.gave_up:
            self._given_up.add(release_id)
        if before is None:
            return
        kinds: list[InstanceEventKind] = []
        if now.restarts > before.restarts:
            kinds.append("crashed")
            if status.oom_killed(pod):
                kinds.append("oom_killed")
            if not status.crash_looping(pod):
                kinds.append("restarted")
        if now.gave_up and not before.gave_up:
            kinds.append("given_up")
        app_id = int((meta.get("labels") or {}).get("appdeck.dev/app-id") or 0)
        for kind in kinds:
            self._emit(InstanceEvent(app_id, release_id, index, kind))

    def _emit(self, event: InstanceEvent) -> None:
        for watcher in self._watchers:
            try:
                watcher(event)
            except Exception:  # a watcher's bug must not stop the others
                log.exception("instance watcher failed")

    def _forget(self, release_id: str) -> None:
        self._handles.pop(release_id, None)
        self._given_up.discard(release_id)
        self._cache.pods.pop(release_id, None)
        self._cache.seen.pop(release_id, None)

    # -- applying ----------------------------------------------------------------------------
    async def _apply(self, release: Release) -> _Handle:
        tenant = _tenant(release)
        objects = render(release, tenant, self.limits, source_token=self.tokens(release))
        secrets: list[JsonObject] = []
        deployment: JsonObject = {}
        uid: str | None = None
        for obj in objects:
            kind = obj["kind"]
            if kind == "HTTPRoute":
                continue  # the router's (one per app, its weights are the rollout's)
            if kind == "Namespace":
                await self._namespace(obj)
            elif kind == "Secret":
                await self._secret(obj)
                secrets.append(obj)
            elif kind == "NetworkPolicy":
                await self._policy(obj)
            else:
                answer = await self._create_or_patch(obj)
                if kind == "Deployment":
                    uid = ((answer or {}).get("metadata") or {}).get("uid")
                    deployment = obj
        if uid:
            ref = owner_reference(deployment, uid)
            for secret in secrets:
                await self.api.call(
                    "PATCH",
                    path_of(secret),
                    body={"metadata": {"ownerReferences": [ref]}},
                    content_type=MERGE_PATCH,
                )
        else:  # a real API server always gives one; the labels still tie them to the release
            log.warning("deployment of %s has no uid: its Secrets stay unowned", release.release_id)
        handle = _Handle(
            names.namespace(tenant, self.limits),
            names.release_name(release, tenant),
            release.spec.instances,
            release,
        )
        self._handles[release.release_id] = handle
        return handle

    async def _namespace(self, obj: JsonObject) -> None:
        name = obj["metadata"]["name"]
        if name in self._namespaces:
            return
        try:
            await self.api.call("POST", "/api/v1/namespaces", body=obj)
        except KubeError as exc:
            if exc.status != 409:
                raise
        self._namespaces.add(name)

    async def _secret(self, obj: JsonObject) -> None:
        """Create a Secret; one that exists is left as it is. It is immutable and the
        release's own: its env is frozen with the release, and its source token must be the
        same for every call of ``tokens(release)`` (derived from the release, not random).
        Deleting and creating it again would break the release's pods starting meanwhile."""
        try:
            await self.api.call("POST", path_of(obj).rsplit("/", 1)[0], body=obj)
        except KubeError as exc:
            if exc.status != 409:
                raise

    async def _policy(self, obj: JsonObject) -> None:
        """The app's NetworkPolicy follows its newest release: patched once known."""
        path = path_of(obj)
        if path in self._policies:
            await self.api.call("PATCH", path, body=obj, content_type=MERGE_PATCH)
        else:
            await self._create_or_patch(obj)
            self._policies.add(path)

    async def _create_or_patch(self, obj: JsonObject) -> JsonObject | None:
        path = path_of(obj)
        try:
            answer: JsonObject | None = await self.api.call(
                "POST", path.rsplit("/", 1)[0], body=obj
            )
        except KubeError as exc:
            if exc.status != 409:
                raise
            answer = await self.api.call("PATCH", path, body=obj, content_type=MERGE_PATCH)
        return answer

    async def _patch_deployment(self, handle: _Handle, body: JsonObject) -> None:
        await self.api.call(
            "PATCH",
            named("Deployment", handle.namespace, handle.service),
            body=body,
            content_type=MERGE_PATCH,
        )

    def _handle_of(self, pod: JsonObject) -> _Handle:
        """A handle for a release this driver did not start (its pods say where it is)."""
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        rid = str(labels.get("appdeck.dev/release"))
        app, number = str(labels.get("appdeck.dev/app")), rid.split("-")[-1]
        tenant = str(labels.get("appdeck.dev/tenant"))
        service = names.object_name("app", f"{app}--{tenant}", f"r{number}")
        handle = _Handle(str(meta.get("namespace")), service, 0)
        self._handles[rid] = handle
        return handle


def _tenant(release: Release) -> str:
    """The tenant of a release, from its route key ``<app>--<tenant>`` (a tenant has no
    ``--``: :func:`appdeck.model.hostnames.routable_tenant`)."""
    if "--" not in release.route:
        raise ValueError(f"release {release.release_id} has no route key <app>--<tenant>")
    return release.route.rsplit("--", 1)[1]


def _ns(handle: _Handle | None) -> str | None:
    """Where to list a release's objects: its namespace when known, else every namespace."""
    return handle.namespace if handle is not None else None


def _release_labels(release_id: str) -> Mapping[str, str]:
    return {**_MANAGED, "appdeck.dev/release": release_id}


def _upstream(handle: _Handle) -> str:
    return f"{handle.service}.{handle.namespace}.svc:{SERVICE_PORT}"


def _started(pod: JsonObject, default: float) -> float:
    started = (pod.get("status") or {}).get("startTime")
    if not isinstance(started, str):
        return default
    try:
        return datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default


def _since(cursor_ns: int) -> str:
    """``sinceTime`` for a cursor: RFC 3339 in whole seconds (the API's ``metav1.Time`` has no
    fraction), so a read re-fetches up to a second before the cursor; :func:`_page` drops it."""
    return datetime.fromtimestamp(cursor_ns // 1_000_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str, index: int) -> list[LogLine]:
    """``pods/log?timestamps=true`` lines (``<RFC 3339 nano> <text>``) as log lines whose
    ``seq`` is the timestamp in ns; a line without a timestamp is skipped."""
    lines = []
    for raw in text.splitlines():
        match = _TIMESTAMPED.fullmatch(raw)
        if match is None:
            continue
        whole = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
        ns = int(whole.timestamp()) * 1_000_000_000 + int((match.group(2) or "0").ljust(9, "0"))
        lines.append(LogLine(ns / 1e9, "stdout", match.group(3), ns, index))
    return lines


def _page(lines: list[LogLine], cursor: int | None, limit: int, grep: str | None) -> LogPage:
    """Merge the pods' lines by time and cut a page.

    With a cursor: the lines strictly after it, the oldest ``limit``. A line whose timestamp
    equals the cursor's is taken as already read, so two lines of the same nanosecond (two
    pods, or one burst) that a page boundary splits lose the second: no duplicate is ever
    returned, at that price. Without: the newest ``limit``. ``next_cursor`` is the last line's
    timestamp, or the cursor when nothing came. Lines are ``stdout``: ``pods/log`` merges the
    container's two streams.
    """
    lines.sort(key=lambda line: (line.seq, line.instance or 0))
    if cursor is not None:
        lines = [line for line in lines if line.seq > cursor]
    if grep:
        needle = grep.casefold()
        lines = [line for line in lines if needle in line.text.casefold()]
    lines = lines[:limit] if cursor is not None else lines[-limit:]
    next_cursor = lines[-1].seq if lines else (cursor or 0)
    return LogPage(lines, next_cursor)


def _conforms(driver: KubernetesDriver) -> Driver:
    """mypy's proof that the Kubernetes driver is a :class:`Driver` (never called)."""
    return driver
