"""What ``render()`` makes of a real release of ``hello``, played by this host's podman: its
init container fetches the release's workspace.tar from a real AppDeck endpoint with the
release's token, and the app answers; then a live and a canary release served through
AppDeck's HAProxy data plane with the weights of the route ``http_route()`` renders.

Changed for podman, and only that (:func:`~tests.runtime.kubernetes.podman.for_podman`): the
Namespace, NetworkPolicy and HTTPRoute are not played (podman has no namespaces, enforces no
policy, and has no gateway: the HAProxy data plane takes the route's weights instead); the
emptyDirs are named per release (podman 4.3 shares them by name); the ``http`` port is
published on 127.0.0.1 at a port of its own (podman 4.3 publishes every containerPort, on
0.0.0.0 at the same number). The Secrets are made as podman secrets before the play, and the
emptyDirs with the kubelet's mode 0777 (:meth:`Podman.played`).

Where podman or the sandbox cannot run here, the tests fail in CI and are skipped elsewhere,
saying why; they never pass without running.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appdeck.ingress.routes import Backend
from appdeck.model.release import Release
from appdeck.runtime.kubernetes import names
from appdeck.runtime.kubernetes.limits import ClusterLimits
from appdeck.runtime.kubernetes.manifests import http_route, render
from appdeck.runtime.kubernetes.pods import RUN_AS
from appdeck.runtime.sandbox import Sandbox
from tests.runtime.conftest import HELLO, build_release
from tests.runtime.kubernetes.appdeck_thread import AppDeck, appdeck_serving, data_plane
from tests.runtime.kubernetes.podman import NOT_PLAYED, Podman, for_podman, wait_http
from tests.runtime.kubernetes.test_podman_play import free_port, podman
from tests.support.sandbox import sandbox_or_skip

__all__ = ["podman"]  # the fixture: podman, or a failure in CI and a skip elsewhere

pytestmark = pytest.mark.podman

TENANT = "test"  # build_release routes every release as <app>--test
UID_BASE = 330_000
APP_ID = 51
REQUESTS = 2_000
TOLERANCE = 0.03
CLIENTS = 16


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return sandbox_or_skip(UID_BASE)


@pytest.fixture
def appdeck(tmp_path: Path, sandbox: Sandbox, podman: Podman) -> Iterator[AppDeck]:
    podman.ensure_image()  # before the endpoint: a cold build takes long
    with appdeck_serving(tmp_path / "runtime", sandbox) as deck:
        yield deck


def hello(app: str, number: int, label: str) -> Release:
    """Release ``number`` of ``app`` (the fixture hello under a name of the test's own:
    podman's pods, secrets and volumes are named after it, on a host other runs share)."""
    return build_release(
        app_id=APP_ID,
        app_name=app,
        release_id=f"{APP_ID}-{number}",
        source_path=HELLO,
        runtime="python",  # the renderer's default command: app.py, as the local driver's
        env={"APP_VERSION_LABEL": label},
        health_path="/healthz",
        memory_mb=128,
        cpus=0.5,
    )


def limits(deck: AppDeck, image: str) -> ClusterLimits:
    return ClusterLimits(image=image, source_url=deck.url)


@contextlib.contextmanager
def played_release(
    podman: Podman, deck: AppDeck, release: Release, image: str
) -> Iterator[tuple[int, float]]:
    """``release`` prepared by the local driver, rendered, played; its published port and
    the seconds from the play to its first 200 (``GET /healthz`` on that port)."""
    deck.run(deck.driver.prepare(release))
    objects = render(
        release, TENANT, limits(deck, image), source_token=deck.tars.token(release.release_id)
    )
    port = free_port()
    name = names.release_name(release, TENANT)
    adapted = for_podman(objects, {name: port})
    assert {o["kind"] for o in objects} - {o["kind"] for o in adapted} == set(NOT_PLAYED)
    started = time.monotonic()
    with podman.played(adapted) as played:
        assert len(played.pods) == 1, played
        try:
            status, _ = wait_http("127.0.0.1", port, "/healthz", deadline_s=60)
        except OSError as error:
            logs = podman.logs(played.pods[0])
            pytest.fail(f"release {release.release_id} never answered ({error}):\n{logs}")
        assert status == 200
        yield port, time.monotonic() - started


def split(port: int, host: str) -> collections.Counter[str]:
    """The versions that answered :data:`REQUESTS` GETs of ``/`` through the data plane, from
    :data:`CLIENTS` keep-alive connections at once (the app answers each in ~45 ms here:
    its headers and body leave in two writes, so Nagle waits for a delayed ACK)."""

    def client(count: int) -> collections.Counter[str]:
        seen: collections.Counter[str] = collections.Counter()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            for _ in range(count):
                answer = http.get("/", headers={"host": host})
                assert answer.status_code == 200, answer.text
                seen[answer.json()["version"]] += 1
        return seen

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        shares = [REQUESTS // CLIENTS + (i < REQUESTS % CLIENTS) for i in range(CLIENTS)]
        return sum(pool.map(client, shares), collections.Counter())


def test_a_rendered_release_fetches_its_workspace_from_appdeck_and_answers(
    podman: Podman, appdeck: AppDeck
) -> None:
    image = podman.ensure_image().ref
    release = hello(f"h{uuid.uuid4().hex[:8]}", 1, "live")
    with played_release(podman, appdeck, release, image) as (port, _):
        status, body = wait_http("127.0.0.1", port, "/")
        assert status == 200
        answer = json.loads(body)
        assert (answer["app"], answer["version"]) == ("hello", "live")  # the env Secret's
        assert appdeck.fetched == [release.release_id]  # the init container, with its token
        pod = f"{names.release_name(release, TENANT)}-pod-0"
        probe = (
            "import json, os; print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), "
            "'files': sorted(os.listdir('/app')), 'env': sorted(os.environ), "
            "'app_writable': os.access('/app', os.W_OK)}))"
        )
        inside = json.loads(podman.exec(f"{pod}-app", "/usr/bin/python3", "-c", probe))
        assert (inside["uid"], inside["gid"]) == (RUN_AS, RUN_AS)
        assert "app.py" in inside["files"]
        assert ".workspace.tar" not in inside["files"]  # unpacked, then removed
        assert inside["app_writable"] is False  # mounted read-only in the app's container
        assert "APPDECK_SOURCE_TOKEN" not in inside["env"]  # the init container's only
        assert "APP_VERSION_LABEL" in inside["env"]


def test_live_and_canary_through_the_data_plane_split_by_the_routes_weights(
    podman: Podman, appdeck: AppDeck
) -> None:
    image = podman.ensure_image().ref
    app = f"h{uuid.uuid4().hex[:8]}"
    live, canary = hello(app, 1, "live"), hello(app, 2, "canary")
    route = http_route(app, TENANT, limits(appdeck, image), [(live, 90), (canary, 10)])
    weights = {ref["name"]: ref["weight"] for ref in route["spec"]["rules"][0]["backendRefs"]}
    total = sum(weights.values())
    with contextlib.ExitStack() as stack:
        ports = {}
        for release in (live, canary):
            ports[release.release_id] = stack.enter_context(
                played_release(podman, appdeck, release, image)
            )[0]
        plane = stack.enter_context(data_plane(appdeck))
        backends = [
            Backend(
                release.release_id,
                round(100 * weights[names.release_name(release, TENANT)] / total),
                (f"127.0.0.1:{ports[release.release_id]}",),
            )
            for release in (live, canary)
        ]
        plane.table.set(live.route, backends)
        assert appdeck.run(plane.synced())
        seen = split(plane.port, f"{live.route}.localhost")
    assert sum(seen.values()) == REQUESTS
    for release, label in ((live, "live"), (canary, "canary")):
        wanted = weights[names.release_name(release, TENANT)] / total
        share = seen[label] / REQUESTS
        assert abs(share - wanted) <= TOLERANCE, (label, share, wanted, dict(seen))
