"""The scenario of ``make k8s-e2e``: what the deploy engine will ask of the Kubernetes driver and
the Gateway router, step by step, against whatever API server :class:`Harness` holds.

It runs twice: against a real cluster (``tests/k8s_e2e/test_kubernetes_e2e.py``, where the
controllers, the kubelet and the gateway do their work), and against kmock in the normal suite
(``tests/runtime/kubernetes/test_e2e_scenario_kmock.py``, where the test acts as the
controllers through :meth:`Cluster.reconcile`), so that this module cannot rot unnoticed
between two runs on a cluster.

1. ``first_release``: r1 started, ready, routed at 100;
2. ``canary``: r2 (two instances) started and ready, routed 90/10, 50/50, then 100; the weights
   read back from the HTTPRoute after each step and, with a gateway, measured over requests;
   r1 stopped and nothing labelled with it left;
3. ``logs_with_a_cursor``: r2's startup lines, then a resume after the cursor returns only
   newer lines (the readiness probe's requests keep logging);
4. ``recover_by_a_fresh_driver``: a driver that knows nothing adopts r2 from its labels;
5. ``remove_everything``: unroute, ``remove``, ``remove_app``: nothing labelled with the app
   is left, pods included.

Every wait is bounded (:class:`Bounds`); a step that runs out of time fails with what it saw.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from appdeck.model import hostnames
from appdeck.model.release import AppSpec, HealthCheck, Release
from appdeck.runtime.kubernetes import names
from appdeck.runtime.kubernetes.api import KubeApi, KubeError, collection
from appdeck.runtime.kubernetes.driver import KubernetesDriver
from appdeck.runtime.kubernetes.limits import ClusterLimits
from appdeck.runtime.kubernetes.router import GatewayRouter

APP: Final = "hello"
HEALTH: Final = "/healthz"
LEFT_KINDS: Final = ("HTTPRoute", "NetworkPolicy", "Deployment", "Service", "Secret", "Pod")
"""What must be gone, by the app's labels, after ``remove_app`` (ReplicaSets too, below)."""
APP_PY: Final = '''"""AppDeck's k8s-e2e app: answers with its release, logs every request."""
import os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RELEASE = os.environ["E2E_RELEASE"]  # from the release's env Secret (envFrom)
PORT = int(os.environ["PORT"])


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"release {RELEASE}\\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        print(f"appdeck-e2e {RELEASE} {format % args}", flush=True)


signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 ignores SIGTERM without a handler
server = ThreadingHTTPServer((os.environ.get("HOST", "0.0.0.0"), PORT), Handler)
print(f"appdeck-e2e {RELEASE} listening on {PORT}", flush=True)
server.serve_forever()
'''


def workspace_tar() -> bytes:
    """The release's prepared workspace as the init container fetches it: ``app.py`` alone
    (the standard library only: no ``.venv`` to build)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = APP_PY.encode()
        info = tarfile.TarInfo("app.py")
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def release(app_id: int, tenant: str, number: int, *, instances: int = 1) -> Release:
    """Release ``number`` of the e2e app: its env says which release answers."""
    return Release(
        app_id=app_id,
        app_name=APP,
        number=number,
        spec=AppSpec(instances=instances, health_check=HealthCheck(HEALTH, 2.0)),
        env={"E2E_RELEASE": f"r{number}"},
        route=hostnames.route_label(APP, tenant),
    )


def token(release_id: str) -> str:
    """The workspace download's token of a release: derived from it, the same on every call
    (the driver's ``SourceTokens`` contract; the source server checks it)."""
    return f"appdeck-e2e-source-{release_id}"


class Cluster(Protocol):
    """What a cluster does by itself: a real one's :meth:`reconcile` does nothing (its
    controllers run); kmock's test acts as the ReplicaSet, the kubelet and the garbage
    collector there."""

    async def reconcile(self) -> None: ...


class Traffic(Protocol):
    """Requests through the gateway: which release answered each of ``n`` GETs of ``host``."""

    async def answers(self, host: str, n: int) -> Counter[str]: ...


@dataclass(frozen=True)
class Bounds:
    """Every wait of the scenario, in seconds (a real cluster pulls, fetches and probes)."""

    ready_s: float = 180.0
    gone_s: float = 120.0
    logs_s: float = 30.0
    route_settle_s: float = 60.0
    poll_s: float = 1.0
    requests: int = 400
    """Requests per measured split."""
    tolerance: float = 0.06
    """Largest distance of a measured share from its weight (400 requests: 10 % ± 6 points is
    about 4 standard deviations)."""


@dataclass
class Harness:
    """One run's API server, settings and ports."""

    api: KubeApi
    limits: ClusterLimits
    tenant: str
    app_id: int
    cluster: Cluster
    new_driver: Callable[[], KubernetesDriver]
    router: GatewayRouter
    traffic: Traffic | None = None
    """Requests through the gateway; None: the routing half checks the HTTPRoute only."""
    metrics: bool = False
    """The router reads a real gateway's per-backend counters (``APPDECK_KUBE_METRICS_URL``)."""
    bounds: Bounds = field(default_factory=Bounds)
    said: list[str] = field(default_factory=list)
    """What the run showed, line by line (printed by the e2e: figures and what was skipped)."""

    def say(self, line: str) -> None:
        self.said.append(line)
        print(f"k8s-e2e: {line}", flush=True)


@dataclass(frozen=True)
class _Share:
    release_id: str
    weight: int


async def run(h: Harness) -> None:
    """The whole scenario, in order (each step leaves what the next one needs)."""
    driver = h.new_driver()
    r1 = release(h.app_id, h.tenant, 1)
    r2 = release(h.app_id, h.tenant, 2, instances=2)
    await first_release(h, driver, r1)
    await canary(h, driver, r1, r2)
    await logs_with_a_cursor(h, driver, r2)
    fresh = await recover_by_a_fresh_driver(h, r2)
    await remove_everything(h, fresh, r2)


async def first_release(h: Harness, driver: KubernetesDriver, r1: Release) -> None:
    started = time.monotonic()
    await start_ready(h, driver, r1)
    h.say(f"r1 start → ready in {time.monotonic() - started:.1f} s")
    await route(h, [(r1, 100)])


async def canary(h: Harness, driver: KubernetesDriver, r1: Release, r2: Release) -> None:
    """90/10, 50/50, 100: each step published, its weights read back, its window read (the
    gateway's counters of r2's backend, when the router reads a real gateway's metrics)."""
    started = time.monotonic()
    await start_ready(h, driver, r2)
    h.say(f"r2 (2 instances) start → ready in {time.monotonic() - started:.1f} s")
    key = route_key(h)
    for percent in (10, 50):
        shares = [(r2, percent), (r1, 100 - percent)]
        await publish(h, shares)
        h.router.mark(key, r2.release_id)
        await h.router.refresh()  # the window's baseline
        await measure(h, shares)
        await h.router.refresh()
        requests, errors = h.router.window(key, r2.release_id)
        if h.metrics:
            assert requests > 0, "the gateway's metrics count no request to r2's backend"
            assert errors == 0, f"{errors} 5xx from r2"
            h.say(f"canary {percent} %: the gateway counted {requests} requests to r2, 0 5xx")
        assert not await driver.gave_up(r2.release_id), "the canary's pods crash-loop"
    await route(h, [(r2, 100)])
    await driver.stop(r1.release_id)
    await until_gone(h, {"appdeck.dev/release": r1.release_id}, "r1 after stop")
    h.say("stop r1: nothing labelled with r1 left (pods and ReplicaSets included)")


async def logs_with_a_cursor(h: Harness, driver: KubernetesDriver, r2: Release) -> None:
    marker = "appdeck-e2e r2 listening on"
    deadline = time.monotonic() + h.bounds.logs_s
    while True:
        await h.cluster.reconcile()
        page = await driver.logs(r2.release_id, "runtime")
        if sum(marker in line.text for line in page.lines) >= 2:  # both instances started
            break
        if time.monotonic() >= deadline:
            raise AssertionError(f"no startup line of both r2 pods in the logs: {page.lines}")
        await asyncio.sleep(h.bounds.poll_s)
    assert all(line.seq <= page.next_cursor for line in page.lines)
    seen = {(line.instance, line.seq) for line in page.lines}
    later = await driver.follow(
        r2.release_id, "runtime", page.next_cursor, timeout_s=h.bounds.logs_s
    )
    assert later.lines, f"no line after the cursor within {h.bounds.logs_s:g} s"
    assert all(line.seq > page.next_cursor for line in later.lines), "a line before the cursor"
    assert not seen & {(line.instance, line.seq) for line in later.lines}, "a line came twice"
    assert later.next_cursor == later.lines[-1].seq
    h.say(f"logs: {len(page.lines)} lines, then {len(later.lines)} after the cursor, none twice")


async def recover_by_a_fresh_driver(h: Harness, r2: Release) -> KubernetesDriver:
    """A control-plane restart: a driver that knows nothing finds r2 by its labels."""
    fresh = h.new_driver()
    adoption = await fresh.recover(r2)
    assert [i.index for i in adoption.adopted] == [0, 1], adoption
    assert adoption.dead == []
    running = await fresh.running(r2.release_id)
    upstream = f"{names.release_name(r2, h.tenant)}.{names.namespace(h.tenant, h.limits)}.svc:80"
    assert [(i.index, i.upstream) for i in running] == [(0, upstream), (1, upstream)], running
    released = await fresh.releases()
    assert r2.release_id in released, released
    assert f"{h.app_id}-1" not in released, released
    h.say("recover: a fresh driver adopted r2's 2 instances from labels")
    return fresh


async def remove_everything(h: Harness, driver: KubernetesDriver, r2: Release) -> None:
    h.router.unroute(route_key(h))
    await h.router.published()
    await driver.remove(r2.release_id)
    await driver.remove_app(h.app_id)
    await until_gone(h, {"appdeck.dev/app-id": str(h.app_id)}, "the app after remove_app")
    h.say("remove_app: nothing labelled with the app left (pods and ReplicaSets included)")


# -- the parts -------------------------------------------------------------------------------


def route_key(h: Harness) -> str:
    return hostnames.route_label(APP, h.tenant)


async def start_ready(h: Harness, driver: KubernetesDriver, rel: Release) -> None:
    """Start every instance of ``rel``; wait (bounded) until all are Ready."""
    instances = [await driver.start(rel, i) for i in range(rel.spec.instances)]
    await h.cluster.reconcile()
    readiness = await driver.wait_ready(rel, instances[-1], h.bounds.ready_s)
    assert readiness.ok, f"{rel.release_id} not ready in {h.bounds.ready_s:g} s: {readiness.why}"


async def route(h: Harness, shares: Sequence[tuple[Release, int]]) -> None:
    await publish(h, shares)
    await measure(h, shares)


async def publish(h: Harness, shares: Sequence[tuple[Release, int]]) -> None:
    """Route by ``shares`` and check the HTTPRoute's weights as the API server stored them."""
    h.router.route(route_key(h), [_Share(rel.release_id, weight) for rel, weight in shares])
    await h.router.published()
    wanted = [(names.release_name(rel, h.tenant), weight) for rel, weight in shares]
    assert await stored_weights(h) == wanted


async def measure(h: Harness, shares: Sequence[tuple[Release, int]]) -> None:
    """With a gateway, the split measured over requests; without, say that none was."""
    text = " / ".join(f"r{rel.number} {weight}" for rel, weight in shares)
    if h.traffic is None:
        h.say(f"route {text}: HTTPRoute weights checked (no gateway: no traffic measured)")
        return
    host = hostnames.hostname(APP, h.tenant, h.limits.domain)
    measured = await settled_split(h, h.traffic, host, {f"r{r.number}": w for r, w in shares})
    h.say(f"route {text}: measured {measured} % over {h.bounds.requests} requests")


async def stored_weights(h: Harness) -> list[tuple[str, int]]:
    path = f"{collection('HTTPRoute', names.namespace(h.tenant, h.limits))}/"
    path += names.app_name(APP, h.tenant)
    stored: dict[str, Any] = await h.api.call("GET", path)
    refs = stored["spec"]["rules"][0]["backendRefs"]
    return [(ref["name"], ref["weight"]) for ref in refs]


async def settled_split(
    h: Harness, traffic: Traffic, host: str, weights: dict[str, int]
) -> dict[str, float]:
    """The gateway's split once it follows the route (a gateway programs its proxies a while
    after the API server stored the route): small samples until every answering release is
    the releases answering are exactly the weighted ones, then ``requests`` counted."""
    deadline = time.monotonic() + h.bounds.route_settle_s
    wanted = {name for name, weight in weights.items() if weight}
    while True:
        sample = await traffic.answers(host, 40)
        if set(sample) == wanted:
            break
        if time.monotonic() >= deadline:
            raise AssertionError(f"the gateway does not follow {weights}: {dict(sample)}")
        await asyncio.sleep(h.bounds.poll_s)
    counted = await traffic.answers(host, h.bounds.requests)
    total = sum(counted.values())
    shares = {name: counted[name] / total for name in weights}
    for name, weight in weights.items():
        assert abs(shares[name] - weight / 100) <= h.bounds.tolerance, (name, shares, weights)
    return {name: round(share * 100, 1) for name, share in shares.items()}


async def until_gone(h: Harness, labels: dict[str, str], what: str) -> None:
    """Wait (bounded) until no object of :data:`LEFT_KINDS` nor a ReplicaSet carries
    ``labels`` (a real cluster's pods go after their grace period)."""
    labels = {"app.kubernetes.io/managed-by": "appdeck", **labels}
    deadline = time.monotonic() + h.bounds.gone_s
    while True:
        await h.cluster.reconcile()
        left = await _left(h.api, labels)
        if not left:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: still there after {h.bounds.gone_s:g} s: {left}")
        await asyncio.sleep(h.bounds.poll_s)


async def _left(api: KubeApi, labels: dict[str, str]) -> list[str]:
    left = []
    for kind in LEFT_KINDS:
        left += [f"{kind} {o['metadata']['name']}" for o in await api.list(kind, None, labels)]
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    try:
        found = await api.call(
            "GET", "/apis/apps/v1/replicasets", query={"labelSelector": selector}
        )
    except KubeError as exc:
        if exc.status != 404:
            raise
        found = None
    for item in (found or {}).get("items") or []:
        own = item["metadata"].get("labels") or {}
        if all(own.get(k) == v for k, v in labels.items()):
            left.append(f"ReplicaSet {item['metadata']['name']}")
    return left
