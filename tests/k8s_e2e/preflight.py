"""``make k8s-e2e``'s first step: refuse, with what is missing, when there is no cluster to run
against (``KUBECONFIG`` unset, the cluster unreachable, no Gateway API, no base image named).
Exit 0 when the run can start, 2 otherwise; it never lets the target pass without running."""

from __future__ import annotations

import asyncio
import sys

from appdeck.settings import Settings
from tests.k8s_e2e import cluster


async def _check() -> str | None:
    settings = Settings()
    try:
        run = cluster.run_from_env(settings)
        api = await cluster.connected(settings)
    except cluster.Refused as exc:
        return str(exc)
    async with api.client:
        gateway = await cluster.gateway_state(api, run.limits)
    where = f"{run.limits.gateway_namespace}/{run.limits.gateway_name}"
    print(f"k8s-e2e: gateway {where}: {gateway}")
    if run.gateway_url is None:
        print("k8s-e2e: APPDECK_E2E_GATEWAY_URL unset: routes are checked as objects, no traffic")
    return None


def main() -> int:
    problem = asyncio.run(_check())
    if problem is not None:
        print(f"make k8s-e2e: refused: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
