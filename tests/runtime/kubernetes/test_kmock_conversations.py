"""The Kubernetes driver and the Gateway router talking to an API server (issue 25, "API
conversations"): kmock 0.8 is the server, the test is the controllers (it writes the pods a
ReplicaSet would make, with the status a kubelet would report, and scripts ``pods/log``).

Each test pins the exact calls, in order (``METHOD plural[/name[/sub]]``): the canary's three
route patches, an abort, a retry after a 409, a removal, a recover from labels, logs with a
cursor, and the calls of one deploy per strategy (the issue's figure; docs/kubernetes.md).

What these do not prove: that a real API server answers the same (admission, defaulting,
server-side validation, owner garbage collection, resourceVersion preconditions: kmock has
none of them, see :func:`test_kmock_gaps`), that controllers make the pods, that a gateway
splits traffic by the weights, or anything about timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import kmock
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from appdeck.common.errors import InvalidArgument
from appdeck.model.release import Release
from appdeck.runtime.driver import InstanceEvent
from appdeck.runtime.kubernetes.api import KubeApi, KubeError
from appdeck.runtime.kubernetes.driver import CAPABILITIES, KubernetesDriver
from appdeck.runtime.kubernetes.router import ATTEMPTS, GatewayRouter
from tests.runtime.kubernetes.kube import (
    LIMITS,
    NS,
    ROUTE,
    TOKEN,
    calls,
    count,
    give_uids,
    release,
    run_pods,
)

pytestmark = pytest.mark.kmock(cls=kmock.KubernetesEmulator)

ROUTE_PATH = f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/app-hello--acme"
NEW_RELEASE = [
    "POST secrets",
    "POST secrets",
    "POST deployments",
    "POST services",
    "PATCH networkpolicies/app-hello--acme",
    "PATCH secrets/app-hello--acme-r2-env",
    "PATCH secrets/app-hello--acme-r2-source",
]
"""``start`` of an app's second release: its two Secrets, Deployment and Service created, the
app's NetworkPolicy (known) patched, the Secrets given their owner."""


@dataclass(frozen=True)
class Backend:
    """A share of the route (the ingress's ``Backend`` wants ``127.0.0.1`` upstreams)."""

    release_id: str
    weight: int


class FakeMetrics:
    """The gateway's per-backend counters, as the test sets them."""

    def __init__(self) -> None:
        self.counters: dict[str, tuple[int, int]] = {}

    async def counts(self, namespace: str, service: str) -> tuple[int, int]:
        return self.counters.get(service, (0, 0))


@pytest.fixture
async def api(kmock: kmock.KubernetesEmulator) -> AsyncIterator[KubeApi]:
    give_uids(kmock)
    async with ApiClient(Configuration(host=str(kmock.url).rstrip("/"))) as client:
        yield KubeApi(client, timeout_s=5.0)


@pytest.fixture
def driver(api: KubeApi) -> KubernetesDriver:
    return KubernetesDriver(api, LIMITS, lambda _release: TOKEN, sleep=_no_sleep)


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
async def router(api: KubeApi, metrics: FakeMetrics) -> AsyncIterator[GatewayRouter]:
    router = GatewayRouter(api, LIMITS, metrics)
    yield router
    await router.close()


async def _no_sleep(_seconds: float) -> None:
    await asyncio.sleep(0)


def weights(mock: kmock.KubernetesEmulator) -> list[tuple[str, int]]:
    route = mock.objects["gateway.networking.k8s.io/v1/httproutes", NS, "app-hello--acme"]
    refs = route["spec"]["rules"][0]["backendRefs"]
    return [(ref["name"], ref["weight"]) for ref in refs]


async def live(
    mock: kmock.KubernetesEmulator, driver: KubernetesDriver, router: GatewayRouter, rel: Release
) -> None:
    """``rel`` started, ready and routed at 100 (what a first deploy leaves)."""
    instance = await driver.start(rel, 0)
    run_pods(mock, rel)
    assert (await driver.wait_ready(rel, instance, 1.0)).ok
    router.route(ROUTE, [Backend(rel.release_id, 100)])
    await router.published()


async def test_start_creates_in_order_then_owns_the_secrets(
    kmock: kmock.KubernetesEmulator, driver: KubernetesDriver
) -> None:
    r1 = release(1, instances=2)
    instance = await driver.start(r1, 0)

    assert calls(kmock) == [
        "POST secrets",
        "POST secrets",
        "POST deployments",
        "POST services",
        "POST networkpolicies",
        "PATCH secrets/app-hello--acme-r1-env",
        "PATCH secrets/app-hello--acme-r1-source",
    ]
    assert instance.upstream == f"app-hello--acme-r1.{NS}.svc:80"
    env = kmock.objects["v1/secrets", NS, "app-hello--acme-r1-env"]
    assert env["immutable"] is True
    assert env["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "app-hello--acme-r1",
            "uid": "uid-app-hello--acme-r1",
            "blockOwnerDeletion": False,
        }
    ]
    # the route is the router's: start never writes one (a canary's share would be lost)
    assert ("gateway.networking.k8s.io/v1/httproutes", NS, "app-hello--acme") not in kmock.objects
    # index 1 of the same release: the Deployment runs both instances, nothing to call
    before = count(kmock)
    assert (await driver.start(r1, 1)).index == 1
    assert count(kmock) == before
    assert driver.capabilities() == CAPABILITIES
    assert not CAPABILITIES.indexed_instances
    assert not CAPABILITIES.in_place_restart


async def test_start_again_patches_what_exists_and_keeps_the_secrets(
    kmock: kmock.KubernetesEmulator, api: KubeApi
) -> None:
    r1 = release(1)
    first = KubernetesDriver(api, LIMITS, lambda _r: TOKEN)
    await first.start(r1, 0)
    # another replica (or this one after a crash between two calls) applies the same release
    again = KubernetesDriver(api, LIMITS, lambda _r: TOKEN)
    mark = count(kmock)
    await again.start(r1, 0)

    assert calls(kmock, mark) == [
        "POST secrets",  # 409: kept (immutable, the release's own)
        "POST secrets",  # 409
        "POST deployments",
        "PATCH deployments/app-hello--acme-r1",
        "POST services",
        "PATCH services/app-hello--acme-r1",
        "POST networkpolicies",
        "PATCH networkpolicies/app-hello--acme",
    ]  # no uid in a PATCH answer from kmock: ownership is the first apply's (see the gaps)


async def test_canary_10_50_100_is_three_route_patches(
    kmock: kmock.KubernetesEmulator,
    driver: KubernetesDriver,
    router: GatewayRouter,
    metrics: FakeMetrics,
) -> None:
    old, new = release(1), release(2)
    await live(kmock, driver, router, old)
    mark = count(kmock)

    instance = await driver.start(new, 0)
    run_pods(kmock, new)
    assert (await driver.wait_ready(new, instance, 1.0)).ok
    seen = []
    # the gateway's counters of the canary's backend after each window, and the window read
    for percent, counters, window in ((10, (1000, 1), (1000, 1)), (50, (5000, 5), (4000, 4))):
        router.route(
            ROUTE, [Backend(new.release_id, percent), Backend(old.release_id, 100 - percent)]
        )
        await router.published()
        seen.append(weights(kmock))
        router.mark(ROUTE, new.release_id)
        await router.refresh()  # the baseline
        metrics.counters["app-hello--acme-r2"] = counters
        assert not await driver.gave_up(new.release_id)
        await router.refresh()
        assert router.window(ROUTE, new.release_id) == window
    router.route(ROUTE, [Backend(new.release_id, 100)])
    assert router.window(ROUTE, new.release_id) == (0, 0)  # the route changed: no window open
    await router.published()
    seen.append(weights(kmock))
    await driver.stop(old.release_id)

    assert calls(kmock, mark) == [
        *NEW_RELEASE,
        "GET pods",  # wait_ready
        "PATCH httproutes/app-hello--acme",  # 10 %
        "GET pods",  # gave_up, in the analysis window
        "PATCH httproutes/app-hello--acme",  # 50 %
        "GET pods",
        "PATCH httproutes/app-hello--acme",  # 100 %
        "GET deployments",  # stop the old release, by label
        "DELETE deployments/app-hello--acme-r1",
        "GET services",
        "DELETE services/app-hello--acme-r1",
        "GET secrets",
        "DELETE secrets/app-hello--acme-r1-env",
        "DELETE secrets/app-hello--acme-r1-source",
    ]
    assert seen == [
        [("app-hello--acme-r2", 10), ("app-hello--acme-r1", 90)],
        [("app-hello--acme-r2", 50), ("app-hello--acme-r1", 50)],
        [("app-hello--acme-r2", 100)],
    ]
    assert kmock.objects["apps/v1/deployments", NS, "app-hello--acme-r1", -1] is None  # deleted


async def test_canary_abort_gives_the_old_release_all_traffic(
    kmock: kmock.KubernetesEmulator,
    driver: KubernetesDriver,
    router: GatewayRouter,
) -> None:
    old, new = release(1), release(2)
    await live(kmock, driver, router, old)
    instance = await driver.start(new, 0)
    run_pods(kmock, new)
    assert (await driver.wait_ready(new, instance, 1.0)).ok
    router.route(ROUTE, [Backend(new.release_id, 10), Backend(old.release_id, 90)])
    await router.published()
    mark = count(kmock)
    # the kubelet: the canary's container keeps crashing
    last = {"exitCode": 3, "reason": "Error"}
    run_pods(kmock, new, ready=False, restarts=5, waiting="CrashLoopBackOff", last=last)

    assert await driver.gave_up(new.release_id)
    router.route(ROUTE, [Backend(old.release_id, 100)])  # Rollout.abort: route_back, then stop
    await router.published()
    await driver.stop(new.release_id)

    assert calls(kmock, mark) == [
        "GET pods",
        "PATCH httproutes/app-hello--acme",
        "GET deployments",
        "DELETE deployments/app-hello--acme-r2",
        "GET services",
        "DELETE services/app-hello--acme-r2",
        "GET secrets",
        "DELETE secrets/app-hello--acme-r2-env",
        "DELETE secrets/app-hello--acme-r2-source",
    ]
    assert weights(kmock) == [("app-hello--acme-r1", 100)]
    assert await driver.gave_up(new.release_id)  # sticky: no call needed
    assert calls(kmock, mark)[-1] == "DELETE secrets/app-hello--acme-r2-source"
    assert [s.state for s in driver.inspect(new.release_id)] == []  # stopped: forgotten


async def test_a_route_patch_refused_with_409_is_read_again_and_retried(
    kmock: kmock.KubernetesEmulator, router: GatewayRouter
) -> None:
    router.route(ROUTE, [Backend("7-1", 100)])
    await router.published()
    # somebody else wrote the route since: the API server refuses our resourceVersion once
    kmock["patch", ROUTE_PATH][:1] << 409 << {"kind": "Status", "reason": "Conflict"}
    mark = count(kmock)

    router.route(ROUTE, [Backend("7-2", 10), Backend("7-1", 90)])
    await router.published()

    assert calls(kmock, mark) == [
        "PATCH httproutes/app-hello--acme",  # 409
        "GET httproutes/app-hello--acme",
        "PATCH httproutes/app-hello--acme",
    ]
    assert weights(kmock) == [("app-hello--acme-r2", 10), ("app-hello--acme-r1", 90)]

    # bounded: a route that keeps conflicting is given up after ATTEMPTS patches
    kmock["patch", ROUTE_PATH] << 409 << {"kind": "Status", "reason": "Conflict"}
    mark = count(kmock)
    router.route(ROUTE, [Backend("7-2", 50), Backend("7-1", 50)])
    with pytest.raises(KubeError) as caught:
        await router.published()
    assert caught.value.status == 409
    assert calls(kmock, mark).count("PATCH httproutes/app-hello--acme") == ATTEMPTS


async def test_removal_deletes_by_label(
    kmock: kmock.KubernetesEmulator, driver: KubernetesDriver, router: GatewayRouter
) -> None:
    r1 = release(1)
    await live(kmock, driver, router, r1)
    mark = count(kmock)

    router.unroute(ROUTE)
    await router.published()
    await driver.remove(r1.release_id)
    await driver.remove_app(r1.app_id)

    assert calls(kmock, mark) == [
        "DELETE httproutes/app-hello--acme",
        "GET deployments",
        "DELETE deployments/app-hello--acme-r1",
        "GET services",
        "DELETE services/app-hello--acme-r1",
        "GET secrets",
        "DELETE secrets/app-hello--acme-r1-env",
        "DELETE secrets/app-hello--acme-r1-source",
        "GET httproutes",  # remove_app: everything with the app's id, in every namespace
        "GET networkpolicies",
        "DELETE networkpolicies/app-hello--acme",
        "GET deployments",
        "GET services",
        "GET secrets",
    ]
    left = [key for key in kmock.objects if not kmock.objects[key].deleted]
    assert [key for key in left if key[0].plural != "pods"] == []


async def test_recover_after_a_restart_finds_the_release_by_its_labels(
    kmock: kmock.KubernetesEmulator, api: KubeApi, driver: KubernetesDriver
) -> None:
    r1, r2 = release(1, instances=2), release(2)
    await driver.start(r1, 0)
    run_pods(kmock, r1)
    # the control plane restarts: a new driver knows nothing
    fresh = KubernetesDriver(api, LIMITS, lambda _r: TOKEN)
    mark = count(kmock)

    adopted = await fresh.recover(r1)
    running = await fresh.running(r1.release_id)
    gone = await fresh.recover(r2)  # never started: every index dead

    assert calls(kmock, mark) == ["GET deployments", "GET pods", "GET deployments"]
    assert [i.index for i in adopted.adopted] == [0, 1]
    assert adopted.dead == []
    assert [(i.index, i.upstream) for i in running] == [
        (0, f"app-hello--acme-r1.{NS}.svc:80"),
        (1, f"app-hello--acme-r1.{NS}.svc:80"),
    ]
    assert gone.adopted == []
    assert gone.dead == [0]
    assert [s.state for s in fresh.inspect(r1.release_id)] == ["running", "running"]
    assert await fresh.releases() == ["7-1"]


async def test_wait_ready_says_why_not(
    kmock: kmock.KubernetesEmulator, driver: KubernetesDriver
) -> None:
    r1 = release(1)
    instance = await driver.start(r1, 0)
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {
                "ready": False,
                "restarts": 2,
                "waiting": "CrashLoopBackOff",
                "last": {"exitCode": 137, "reason": "OOMKilled"},
            },
            "CrashLoopBackOff: restarted 2 times, last exit signal KILL (OOMKilled)",
        ),
        (
            {
                "ready": False,
                "scheduled": {
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient memory.",
                },
            },
            "unschedulable: 0/3 nodes are available: 3 Insufficient memory.",
        ),
        ({"ready": False}, "running, readiness probe failing (GET /)"),
    ]
    for pod_status, why in cases:
        run_pods(kmock, r1, **pod_status)
        readiness = await driver.wait_ready(r1, instance, 0.0)
        assert (readiness.ok, readiness.why) == (False, why)
    del kmock.objects["v1/pods", NS, "app-hello--acme-r1-0"]
    assert (await driver.wait_ready(r1, instance, 0.0)).why == (
        "no pod of the release exists (the Deployment made none yet)"
    )


async def test_events_come_from_differences_between_reads(
    kmock: kmock.KubernetesEmulator, driver: KubernetesDriver
) -> None:
    r1 = release(1)
    seen: list[InstanceEvent] = []
    driver.events(seen.append)
    await driver.start(r1, 0)
    run_pods(kmock, r1)
    await driver.refresh()
    run_pods(kmock, r1, restarts=1, last={"exitCode": 137, "reason": "OOMKilled"})
    await driver.refresh()
    run_pods(
        kmock,
        r1,
        ready=False,
        restarts=5,
        waiting="CrashLoopBackOff",
        last={"exitCode": 1, "reason": "Error"},
    )
    await driver.refresh()

    assert [e.kind for e in seen] == ["crashed", "oom_killed", "restarted", "crashed", "given_up"]
    assert {(e.app_id, e.release_id, e.index) for e in seen} == {(7, "7-1", 0)}
    status = driver.inspect(r1.release_id)[0]
    assert (status.state, status.restarts, status.last_exit) == ("crash_loop", 5, "status 1")
    assert await driver.gave_up(r1.release_id)


async def test_logs_page_by_a_nanosecond_cursor(
    kmock: kmock.KubernetesEmulator, driver: KubernetesDriver
) -> None:
    r1 = release(1)
    await driver.start(r1, 0)
    run_pods(kmock, r1)
    log = [
        "2026-11-27T17:00:00.100000000Z one",
        "2026-11-27T17:00:00.200000000Z two",
        "2026-11-27T17:00:01.000000001Z three",
        "2026-11-27T17:00:02Z four",
    ]

    def pods_log(request: Any) -> bytes:
        """The kubelet's answer: whole lines, since a whole second, the last N."""
        assert request.params["timestamps"] == "true"
        assert request.params["container"] == "app"
        lines = log
        if "sinceTime" in request.params:
            lines = [line for line in lines if line[:19] >= request.params["sinceTime"][:19]]
        if "tailLines" in request.params:
            lines = lines[-int(request.params["tailLines"]) :]
        return "".join(f"{line}\n" for line in lines).encode()

    kmock["get", kmock.subresource("log")] << pods_log
    mark = count(kmock)

    first = await driver.logs(r1.release_id, "runtime", None, limit=2)
    second = await driver.logs(r1.release_id, "runtime", first.next_cursor - 3_000_000_000, limit=2)
    third = await driver.logs(r1.release_id, "runtime", second.next_cursor, limit=2)
    last = await driver.logs(r1.release_id, "runtime", third.next_cursor, limit=2)

    assert [line.text for line in first.lines] == ["three", "four"]
    assert first.next_cursor == 1_795_798_802_000_000_000
    assert [line.text for line in second.lines] == ["one", "two"]
    assert second.next_cursor == 1_795_798_800_200_000_000
    # resuming at 17:00:00.2 asks sinceTime=17:00:00Z: "one" and "two" come again and are dropped
    assert [line.text for line in third.lines] == ["three", "four"]
    assert (last.lines, last.next_cursor) == ([], third.next_cursor)
    assert calls(kmock, mark) == ["GET pods", "GET pods/app-hello--acme-r1-0/log"] * 4
    build = await driver.logs(r1.release_id, "build")
    assert build.lines == []

    # follow: nothing new within the time given is an empty page; a new line ends the wait
    assert (
        await driver.follow(r1.release_id, "runtime", last.next_cursor, timeout_s=0.0)
    ).lines == []
    log.append("2026-11-27T17:00:03.5Z five")
    followed = await driver.follow(r1.release_id, "runtime", last.next_cursor, timeout_s=5.0)
    assert [line.text for line in followed.lines] == ["five"]
    assert followed.next_cursor == 1_795_798_803_500_000_000


async def test_every_call_has_a_deadline(kmock: kmock.KubernetesEmulator) -> None:
    never = asyncio.Event()

    async def hang() -> bytes:
        await never.wait()
        return b"{}"

    kmock["get", kmock.resource("v1/pods")] << hang
    async with ApiClient(Configuration(host=str(kmock.url).rstrip("/"))) as client:
        slow = KubeApi(client, timeout_s=0.2)
        with pytest.raises(KubeError) as caught:
            await slow.list("Pod", NS, {})
    never.set()
    assert (caught.value.status, caught.value.reason) == (0, "Timeout")


async def test_kmock_gaps(kmock: kmock.KubernetesEmulator, api: KubeApi) -> None:
    """What kmock 0.8 does not emulate, each as it answers now: when an upgrade closes a gap,
    this fails, and the tests above can lean on the server instead of the test."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": NS, "labels": {"a": "1"}},
        "spec": {"replicas": 1},
    }
    deployments = f"/apis/apps/v1/namespaces/{NS}/deployments"
    kmock.objects["apps/v1/deployments", NS, "x"] = {
        "metadata": {"name": "x", "labels": {"a": "2"}}
    }
    created = await api.call(
        "POST",
        f"/api/v1/namespaces/{NS}/services",
        body={
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s", "namespace": NS},
        },
    )
    # 1. no uid, resourceVersion, creationTimestamp or generation on a created object
    assert set(created["metadata"]) == {"name", "namespace"}
    # 2. a labelSelector is ignored: every object of the kind comes back
    listed = await api.call("GET", deployments, query={"labelSelector": "a=1"})
    assert [i["metadata"]["name"] for i in listed["items"]] == ["x"]
    # 3. the Namespace collection cannot be served: 'namespaces' is read as a namespace (500)
    with pytest.raises(KubeError) as caught:
        await api.call("POST", "/api/v1/namespaces", body={"metadata": {"name": "n"}})
    assert caught.value.status == 500
    # 4. no server-side apply: an apply patch to a missing object is 404, not a create
    with pytest.raises(KubeError) as caught:
        await api.call(
            "PATCH",
            f"{deployments}/d",
            body=deployment,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": "t"},
        )
    assert caught.value.status == 404
    # 5. no PUT (replace) at all
    with pytest.raises(KubeError) as caught:
        await api.call("PUT", f"{deployments}/x", body=deployment)
    assert caught.value.status == 404
    # 6. no resourceVersion precondition: a stale version is accepted and stored as sent
    patched = await api.call(
        "PATCH",
        f"{deployments}/x",
        body={
            "metadata": {"resourceVersion": "stale"},
            "spec": {"replicas": 2},
        },
        content_type="application/merge-patch+json",
    )
    assert patched["metadata"]["resourceVersion"] == "stale"
    # 7. an immutable Secret's data can be patched
    await api.call(
        "POST",
        f"/api/v1/namespaces/{NS}/secrets",
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "e", "namespace": NS},
            "immutable": True,
            "data": {"K": "dg=="},
        },
    )
    changed = await api.call(
        "PATCH",
        f"/api/v1/namespaces/{NS}/secrets/e",
        body={"data": {"K": "dw=="}},
        content_type="application/merge-patch+json",
    )
    assert changed["data"] == {"K": "dw=="}
    # 8. a scripted error answer does not stop the write: the object changes anyway
    #    (a filter's index counts from the start: [:1] is the first PATCH of y ever)
    kmock.objects["apps/v1/deployments", NS, "y"] = {"metadata": {"name": "y"}, "spec": {}}
    kmock["patch", f"{deployments}/y"][:1] << 409
    with pytest.raises(KubeError):
        await api.call(
            "PATCH",
            f"{deployments}/y",
            body={"spec": {"replicas": 9}},
            content_type="application/merge-patch+json",
        )
    assert kmock.objects["apps/v1/deployments", NS, "y"]["spec"]["replicas"] == 9
    # 9. no controllers: a Deployment makes no ReplicaSet or pod; deleting an owner leaves
    #    its dependents (no garbage collector)
    await api.call(
        "POST",
        f"/api/v1/namespaces/{NS}/secrets",
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "owned",
                "namespace": NS,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Service", "name": "s", "uid": "u"}
                ],
            },
        },
    )
    await api.call("DELETE", f"/api/v1/namespaces/{NS}/services/s")
    assert not kmock.objects["v1/secrets", NS, "owned"].deleted
    assert [k for k in kmock.objects if k[0].plural in ("pods", "replicasets")] == []
    # 10. pods/log is not served (it is a fetch of the pod, 404 for a missing one)
    with pytest.raises(KubeError) as caught:
        await api.text(f"/api/v1/namespaces/{NS}/pods/p/log", {"timestamps": "true"})
    assert caught.value.status == 404


async def _deploy(
    strategy: str,
    mock: kmock.KubernetesEmulator,
    driver: KubernetesDriver,
    router: GatewayRouter,
    old: Release,
    new: Release,
) -> None:
    """What the deploy engine asks of the driver and the router for one deploy of ``new``
    over the live ``old`` (one instance each), following ``rollout.py`` and the engine's
    supersede step (the old release stopped unless blue/green keeps it warm); a stop waits for
    the route first, as ``RoutesFirst`` does. The canary's analysis window reads ``gave_up``
    once per step (a window of 0 s)."""

    async def stop(release_id: str) -> None:
        await router.published()
        await driver.stop(release_id)

    async def start() -> None:
        instance = await driver.start(new, 0)
        run_pods(mock, new)  # the controllers
        assert (await driver.wait_ready(new, instance, 1.0)).ok

    await driver.prepare(new)
    assert await driver.running(old.release_id)  # the engine's instances_of(old)
    if strategy == "recreate":
        router.unroute(ROUTE)
        await stop(old.release_id)
        await start()
        router.route(ROUTE, [Backend(new.release_id, 100)])
    elif strategy == "rolling":
        await start()
        router.route(ROUTE, [Backend(new.release_id, 50), Backend(old.release_id, 50)])
        await router.published()
        router.route(ROUTE, [Backend(new.release_id, 100)])
        await stop(old.release_id)
    elif strategy == "blue_green":
        await start()
        router.route(ROUTE, [Backend(new.release_id, 100)])
    else:
        await start()
        for percent in (10, 50):
            router.route(
                ROUTE, [Backend(new.release_id, percent), Backend(old.release_id, 100 - percent)]
            )
            await router.published()
            router.mark(ROUTE, new.release_id)
            assert not await driver.gave_up(new.release_id)
        router.route(ROUTE, [Backend(new.release_id, 100)])
    await router.published()
    if strategy != "blue_green":  # SupersedeOld
        await stop(old.release_id)


STOP_OLD = [
    "GET deployments",
    "DELETE deployments/app-hello--acme-r1",
    "GET services",
    "DELETE services/app-hello--acme-r1",
    "GET secrets",
    "DELETE secrets/app-hello--acme-r1-env",
    "DELETE secrets/app-hello--acme-r1-source",
]
STOPPED_ALREADY = ["GET deployments", "GET services", "GET secrets"]
PER_STRATEGY = {
    "recreate": [
        "GET pods",
        "DELETE httproutes/app-hello--acme",
        *STOP_OLD,
        *NEW_RELEASE,
        "GET pods",
        "POST httproutes",
        *STOPPED_ALREADY,
    ],
    "rolling": [
        "GET pods",
        *NEW_RELEASE,
        "GET pods",
        "PATCH httproutes/app-hello--acme",
        "PATCH httproutes/app-hello--acme",
        *STOP_OLD,
        *STOPPED_ALREADY,
    ],
    "blue_green": ["GET pods", *NEW_RELEASE, "GET pods", "PATCH httproutes/app-hello--acme"],
    "canary": [
        "GET pods",
        *NEW_RELEASE,
        "GET pods",
        "PATCH httproutes/app-hello--acme",
        "GET pods",
        "PATCH httproutes/app-hello--acme",
        "GET pods",
        "PATCH httproutes/app-hello--acme",
        *STOP_OLD,
    ],
}
"""The calls of one deploy by strategy (one instance, over a live release): the figure of
issue 25 (docs/kubernetes.md, "API calls per deploy")."""


@pytest.mark.parametrize("strategy", list(PER_STRATEGY))
async def test_api_calls_per_deploy_by_strategy(
    strategy: str,
    kmock: kmock.KubernetesEmulator,
    driver: KubernetesDriver,
    router: GatewayRouter,
) -> None:
    old, new = release(1), release(2)
    await live(kmock, driver, router, old)
    mark = count(kmock)

    await _deploy(strategy, kmock, driver, router, old, new)

    assert calls(kmock, mark) == PER_STRATEGY[strategy]
    assert weights(kmock) == [("app-hello--acme-r2", 100)]
    assert {s: len(c) for s, c in PER_STRATEGY.items()} == {
        "recreate": 21,
        "rolling": 21,
        "blue_green": 10,
        "canary": 21,
    }


async def test_route_changes_before_the_worker_runs_make_one_write(
    kmock: kmock.KubernetesEmulator, router: GatewayRouter
) -> None:
    router.route(ROUTE, [Backend("7-1", 100)])
    router.route(ROUTE, [Backend("7-2", 10), Backend("7-1", 90)])
    router.route(ROUTE, [Backend("7-2", 50), Backend("7-1", 50)])
    await router.published()

    assert calls(kmock) == ["POST httproutes"]  # newest wins
    assert weights(kmock) == [("app-hello--acme-r2", 50), ("app-hello--acme-r1", 50)]
    with pytest.raises(InvalidArgument, match="every weight is 0"):
        router.route(ROUTE, [Backend("7-2", 0)])  # refused at once, never written
    assert calls(kmock) == ["POST httproutes"]


async def test_stopping_one_index_scales_the_deployment_down(
    kmock: kmock.KubernetesEmulator, driver: KubernetesDriver
) -> None:
    r1 = release(1, instances=3)
    await driver.start(r1, 0)
    mark = count(kmock)

    await driver.stop(r1.release_id, 0)
    await driver.stop(r1.release_id, 1)
    await driver.stop(r1.release_id, 2)  # the last one: the release stops

    assert calls(kmock, mark) == [
        "PATCH deployments/app-hello--acme-r1",
        "PATCH deployments/app-hello--acme-r1",
        "GET deployments",
        "DELETE deployments/app-hello--acme-r1",
        "GET services",
        "DELETE services/app-hello--acme-r1",
        "GET secrets",
        "DELETE secrets/app-hello--acme-r1-env",
        "DELETE secrets/app-hello--acme-r1-source",
    ]
    history = kmock.objects["apps/v1/deployments", NS, "app-hello--acme-r1", :]
    assert [v["spec"]["replicas"] for v in history if v is not None] == [3, 2, 1]


async def test_starting_an_index_beyond_the_replicas_scales_the_deployment_up(
    kmock: kmock.KubernetesEmulator, driver: KubernetesDriver
) -> None:
    """How the engine scales a driver without ``indexed_instances``: by index, as on the
    local driver (start index n, stop index n), which this driver turns into ``replicas``."""
    r1 = release(1, instances=1)
    await driver.start(r1, 0)
    mark = count(kmock)

    assert (await driver.start(r1, 2)).index == 2
    await driver.start(r1, 1)  # within the replicas already: nothing to call

    assert calls(kmock, mark) == ["PATCH deployments/app-hello--acme-r1"]
    history = kmock.objects["apps/v1/deployments", NS, "app-hello--acme-r1", :]
    assert [v["spec"]["replicas"] for v in history if v is not None] == [1, 3]


async def _until(condition: Any, within_s: float = 5.0) -> bool:
    """Poll ``condition()`` until true or ``within_s`` (a bound, not a timing assertion)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while not condition():
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_the_metrics_poller_runs_while_a_window_is_open(
    api: KubeApi, metrics: FakeMetrics
) -> None:
    router = GatewayRouter(api, LIMITS, metrics, poll_s=0.01)
    metrics.counters["app-hello--acme-r2"] = (100, 0)
    router.mark(ROUTE, "7-2")
    assert await _until(
        lambda: (
            router.window(ROUTE, "7-2") == (0, 0) and router._windows.marks[ROUTE, "7-2"].baseline
        )
    )
    metrics.counters["app-hello--acme-r2"] = (130, 4)
    assert await _until(lambda: router.window(ROUTE, "7-2") == (30, 4))

    router.route(ROUTE, [Backend("7-2", 100)])  # the window closes, the poller ends
    poller = router._windows.poller
    assert poller is not None
    assert await _until(poller.done)
    await router.close()
