"""Apply → serving under podman vs the local driver, and the route's split through the data
plane (issue 25, "Figures").

    .venv/bin/python bench/podman_apply.py [--rounds 7] [--requests 2000]

The same release of ``tests/fixtures/apps/hello`` (runtime ``python``: ``app.py``), prepared
once by the sandboxed local driver, then, interleaved round by round:

- **podman**: ``render()``'s objects adapted for podman 4.3
  (``tests/runtime/kubernetes/podman.py``'s ``for_podman``), the Secrets made as podman secrets
  and ``kube play`` run: apply → the first 200 from ``GET /healthz`` at the pod's published
  port (polled every 5 ms). That includes the init container fetching and unpacking the
  workspace.tar from a real AppDeck endpoint (uvicorn on the host's address) with the
  release's token. Also when ``kube play`` returned (it waits for the init container), and the
  teardown; and the endpoint alone (the whole tar fetched from the host, as the init
  container's ``curl`` does).
- **local**: ``LocalDriver.start`` → the first healthy answer (``health`` polled every 5 ms,
  in the instance's network namespace), then ``stop``, as ``bench/sandbox.py`` measures it.

Then the **split**: a live and a canary release played under podman, given to AppDeck's
HAProxy data plane with ``http_route()``'s weights (90/10 and 50/50), ``--requests`` GETs of
``/`` from 16 keep-alive connections, counted by the version each answer names.

Needs root, bubblewrap, podman (``make k8s-deps``) and haproxy. Raw figures:
``bench/.work/podman_apply.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the podman helper and the test endpoint live under tests/

import httpx  # noqa: E402
from tests.runtime.conftest import HELLO, build_release  # noqa: E402
from tests.runtime.kubernetes.appdeck_thread import AppDeck, appdeck_serving, data_plane  # noqa: E402
from tests.runtime.kubernetes.podman import Podman, for_podman  # noqa: E402

from appdeck.ingress.routes import Backend  # noqa: E402
from appdeck.model.release import Release  # noqa: E402
from appdeck.runtime import InstanceRef, LocalDriver  # noqa: E402
from appdeck.runtime.kubernetes import names  # noqa: E402
from appdeck.runtime.kubernetes.limits import ClusterLimits  # noqa: E402
from appdeck.runtime.kubernetes.manifests import http_route, render  # noqa: E402
from appdeck.runtime.procs import free_port  # noqa: E402
from appdeck.runtime.sandbox import detect  # noqa: E402

TENANT: Final = "test"
APP_ID: Final = 77
POLL_S: Final = 0.005
CLIENTS: Final = 16
WORK: Final = ROOT / "bench" / ".work"


def release(app: str, number: int, label: str) -> Release:
    return build_release(
        app_id=APP_ID,
        app_name=app,
        release_id=f"{APP_ID}-{number}",
        source_path=HELLO,
        runtime="python",
        env={"APP_VERSION_LABEL": label},
        health_path="/healthz",
        memory_mb=128,
        cpus=0.5,
    )


def objects_of(deck: AppDeck, image: str, one: Release, port: int) -> list[dict[str, Any]]:
    limits = ClusterLimits(image=image, source_url=deck.url)
    rendered = render(one, TENANT, limits, source_token=deck.tars.token(one.release_id))
    return for_podman(rendered, {names.release_name(one, TENANT): port})


def first_200(port: int, within: float = 120.0) -> float:
    """Poll ``GET /healthz`` on 127.0.0.1:``port`` every 5 ms; the monotonic time of the 200."""
    deadline = time.monotonic() + within
    with httpx.Client(timeout=1.0) as client:
        while True:
            try:
                if client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    return time.monotonic()
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing answered on port {port} within {within:g} s")
            time.sleep(POLL_S)


def podman_round(podman: Podman, deck: AppDeck, image: str, one: Release) -> dict[str, float]:
    port = free_port()
    adapted = objects_of(deck, image, one, port)
    started = time.monotonic()
    with podman.played(adapted):
        played = time.monotonic()
        serving = first_200(port)
        down = time.monotonic()
    return {
        "play_s": played - started,
        "serving_s": serving - started,
        "teardown_s": time.monotonic() - down,
    }


async def local_round(driver: LocalDriver, one: Release) -> dict[str, float]:
    started = time.monotonic()
    ref: InstanceRef = await driver.start(one, 0, free_port())
    while not (await driver.health(ref, timeout_s=1.0)).ok:
        if time.monotonic() - started > 60:
            raise RuntimeError("the local instance never became healthy")
        await asyncio.sleep(POLL_S)
    serving = time.monotonic()
    await driver.stop(one.release_id)
    return {"serving_s": serving - started, "teardown_s": time.monotonic() - serving}


def fetch_round(deck: AppDeck, one: Release) -> dict[str, float]:
    """What the init container's ``curl`` asks of AppDeck, from the host: the whole tar."""
    url = f"{deck.url}/internal/releases/{one.release_id}/workspace.tar"
    token = deck.tars.token(one.release_id)
    started = time.monotonic()
    answer = httpx.get(url, headers={"authorization": f"Bearer {token}"}, timeout=60)
    answer.raise_for_status()
    return {"fetch_s": time.monotonic() - started, "bytes": float(len(answer.content))}


def measure_split(
    podman: Podman, deck: AppDeck, image: str, weights: tuple[int, int], requests: int
) -> dict[str, Any]:
    app = f"split{weights[0]}"
    live, canary = release(app, 1, "live"), release(app, 2, "canary")
    for one in (live, canary):
        deck.run(deck.driver.prepare(one))
    limits = ClusterLimits(image=image, source_url=deck.url)
    route = http_route(app, TENANT, limits, [(live, weights[0]), (canary, weights[1])])
    refs = route["spec"]["rules"][0]["backendRefs"]
    total = sum(ref["weight"] for ref in refs)
    ports = {live.release_id: free_port(), canary.release_id: free_port()}
    with (
        podman.played(objects_of(deck, image, live, ports[live.release_id])),
        podman.played(objects_of(deck, image, canary, ports[canary.release_id])),
    ):
        for port in ports.values():
            first_200(port)
        with data_plane(deck) as plane:
            plane.table.set(
                live.route,
                [
                    Backend(
                        one.release_id,
                        round(100 * ref["weight"] / total),
                        (f"127.0.0.1:{ports[one.release_id]}",),
                    )
                    for one, ref in zip((live, canary), refs, strict=True)
                ],
            )
            if not deck.run(plane.synced()):
                raise RuntimeError("the data plane never ran the route")
            started = time.monotonic()
            seen = _split(plane.port, f"{live.route}.localhost", requests)
            seconds = time.monotonic() - started
    return {
        "weights": list(weights),
        "requests": requests,
        "live": seen["live"],
        "canary": seen["canary"],
        "canary_share": seen["canary"] / requests,
        "seconds": seconds,
    }


def _split(port: int, host: str, requests: int) -> collections.Counter[str]:
    def client(count: int) -> collections.Counter[str]:
        seen: collections.Counter[str] = collections.Counter()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            for _ in range(count):
                answer = http.get("/", headers={"host": host})
                answer.raise_for_status()
                seen[answer.json()["version"]] += 1
        return seen

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        shares = [requests // CLIENTS + (i < requests % CLIENTS) for i in range(CLIENTS)]
        return sum(pool.map(client, shares), collections.Counter())


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return (
        f"median {statistics.median(values) * 1000:.0f} ms, p90 {p90 * 1000:.0f} (n={len(values)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    podman = Podman()
    problem = podman.problem()
    if problem is not None:
        print(f"podman cannot run a pod here: {problem}", file=sys.stderr)
        return 2
    image = podman.ensure_image().ref
    load_before = os.getloadavg()
    rounds: dict[str, list[dict[str, float]]] = {"podman": [], "local": [], "fetch": []}
    with tempfile.TemporaryDirectory(prefix="podman-bench-") as scratch:
        sandbox = detect(340_000, f"appdeck/bench-{os.getpid()}")
        with appdeck_serving(Path(scratch) / "runtime", sandbox) as deck:
            one = release("bench", 1, "live")
            deck.run(deck.driver.prepare(one))
            for number in range(args.rounds):
                order = ("podman", "local") if number % 2 == 0 else ("local", "podman")
                for kind in order:
                    if kind == "podman":
                        rounds["podman"].append(podman_round(podman, deck, image, one))
                    else:
                        rounds["local"].append(deck.run(local_round(deck.driver, one)))
                rounds["fetch"].append(fetch_round(deck, one))
            splits = [
                measure_split(podman, deck, image, weights, args.requests)
                for weights in ((90, 10), (50, 50))
            ]
    load_after = os.getloadavg()
    figures = {
        "rounds": rounds,
        "splits": splits,
        "load_before": load_before,
        "load_after": load_after,
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "podman_apply.json").write_text(json.dumps(figures, indent=2))
    print(f"apply → serving, podman: {summary([r['serving_s'] for r in rounds['podman']])}")
    print(f"  kube play returned:     {summary([r['play_s'] for r in rounds['podman']])}")
    print(f"  teardown:               {summary([r['teardown_s'] for r in rounds['podman']])}")
    print(f"  workspace.tar alone:    {summary([r['fetch_s'] for r in rounds['fetch']])}", end="")
    print(f", {rounds['fetch'][0]['bytes'] / 1024:.0f} KiB")
    print(f"start → healthy, local:   {summary([r['serving_s'] for r in rounds['local']])}")
    print(f"  stop:                   {summary([r['teardown_s'] for r in rounds['local']])}")
    for split in splits:
        live, canary = split["weights"]
        print(
            f"split {live}/{canary}: {split['live']} live, {split['canary']} canary of "
            f"{split['requests']} (canary {100 * split['canary_share']:.2f} %), "
            f"{split['seconds']:.1f} s"
        )
    print(
        f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} ({os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
