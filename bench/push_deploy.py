"""What a deploy from ``git push`` costs against a deploy from a local path (issue 21 §4).

    .venv/bin/python bench/push_deploy.py [--runs 7]

The real composition root (``Services.start``: real runtime, sandbox, ingress), served by
uvicorn on a free loopback port; the fixture app ``tests/fixtures/apps/hello`` as three apps
of one tenant, each deployed ``--runs`` times with the ``recreate`` strategy, runs
interleaved, a new commit (or file content) each time:

- **local**: ``spec.source_path`` under the tenant's source root, ``deploy_app``
  (``Deployments.deploy``): the source is copied in the sandbox, built, started, routed.
- **push**: the app connected to its hosted repository with ``auto_deploy``; from ``git
  push`` (the real git client, HTTP Basic with a personal access token) until the
  deployment of that commit is live: the push itself (``git http-backend`` in the sandbox),
  the push event (the head read in the sandbox), the checkout (``git archive`` in the
  sandbox, extracted) and the same deploy.
- **inline**: ``deploy_app`` with ``files`` (``HostedService.commit_files``, fast-import in
  the sandbox, then the deploy of that commit).

Prints the median and the spread (min-max) of each, in milliseconds. Needs root and bubblewrap.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvicorn

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.common.identity import Principal
from appdeck.platform.repos.inline import InlineFile
from appdeck.settings import Settings

HELLO = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "apps" / "hello"
SPEC = {"run_command": "python3 app.py", "health_check": {"path": "/healthz"}}
_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.com",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.com",
}


async def _git(*args: str, cwd: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        "git", *args, cwd=cwd, env=_ENV,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    if proc.returncode != 0:
        raise RuntimeError(out.decode(errors="replace"))


async def _timed(work: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await work()
    return (time.perf_counter() - start) * 1000


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as scratch:
        root = Path(scratch)
        shutil.copytree(HELLO, root / "src" / "hello")
        (root / "src").chmod(0o755)
        settings = Settings.model_validate(
            {"data_dir": root / "data", "source_roots": [root / "src"], "rate_limit_per_second": 0}
        )
        services = await Services.start(settings)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(services.asgi(), log_level="warning"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await _measure(services, root, sock.getsockname()[1], runs)
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, 30)
            await services.stop(stop_apps=True)


async def _measure(services: Services, root: Path, port: int, runs: int) -> None:
    platform = services.platform
    assert platform is not None
    assert platform.hosting is not None
    admin = IdentityAdmin(services.identities, services.token_issuer)
    await admin.create_tenant("acme")
    user = await admin.create_user("acme", "alice", None, role="admin")
    who = Principal("acme", user.id, kind="oauth")
    token, _ = await admin.create_pat("acme", "alice", "repos:write deploy:write")
    local = (await platform.apps.register(
        who, "local", {**SPEC, "source_path": str(root / "src" / "hello")}
    )).app.id  # fmt: skip
    pushed = (await platform.apps.register(who, "pushed", SPEC)).app.id
    await platform.repos.connect(who, pushed, "hosted", auto_deploy=True)
    inline = (await platform.apps.register(who, "inline", SPEC)).app.id
    work = root / "laptop"
    shutil.copytree(HELLO, work)
    await _git("init", "-q", "-b", "main", cwd=work)
    url = f"http://x:{token}@127.0.0.1:{port}/git/acme/pushed.git"
    app_py = (HELLO / "app.py").read_text()
    times: dict[str, list[float]] = {"local": [], "push": [], "inline": []}

    async def deploy_local() -> None:
        view = await platform.deployments.deploy(who, local, "recreate", wait_s=None)
        assert view.live, view.record.status_message

    async def push(number: int) -> None:
        (work / "run.txt").write_text(str(number))
        await _git("add", "-A", cwd=work)
        await _git("commit", "-q", "-m", f"run {number}", cwd=work)
        await _git("push", "-q", url, "main", cwd=work)
        await platform.repos.settle()  # the push event's deploy (in the background)
        [latest] = await platform.deploys.store.for_app(pushed, offset=0, limit=1)
        assert latest.state == "live", latest.status_message

    async def deploy_inline(number: int) -> None:
        files = [InlineFile("app.py", app_py), InlineFile("run.txt", str(number))]
        made = await platform.hosting.commit_files(who, inline, files)
        view = await platform.deployments.deploy(
            who, inline, "recreate", wait_s=None, commit=made.sha
        )
        assert view.live, view.record.status_message

    try:
        await _rounds(runs, times, deploy_local, push, deploy_inline)
    finally:  # their disks are unmounted with them
        for app_id in (local, pushed, inline):
            await platform.apps.delete(who, app_id, confirmed=True)
    for name, values in times.items():
        print(
            f"{name:7} median {statistics.median(values):8.0f} ms   "
            f"min {min(values):8.0f}   max {max(values):8.0f}   (n={len(values)})"
        )


async def _rounds(
    runs: int,
    times: dict[str, list[float]],
    deploy_local: Callable[[], Awaitable[None]],
    push: Callable[[int], Awaitable[None]],
    deploy_inline: Callable[[int], Awaitable[None]],
) -> None:
    for number in range(runs + 1):  # the first round warms up (not counted)
        spent = {
            "local": await _timed(deploy_local),
            "push": await _timed(lambda n=number: push(n)),  # type: ignore[misc]
            "inline": await _timed(lambda n=number: deploy_inline(n)),  # type: ignore[misc]
        }
        if number:
            for name, ms in spent.items():
                times[name].append(ms)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    asyncio.run(main(parser.parse_args().runs))
