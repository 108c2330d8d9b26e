"""A reload without ``haproxy -c`` before it: a config the master refuses is reported as soon
as the master counts the failure (never at the reload's deadline), the running worker keeps
serving the previous one, the reason is logged, and the next good config reloads."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appdeck.ingress.haproxy import process as process_module
from appdeck.ingress.haproxy.config import Layout, Rendered
from appdeck.ingress.haproxy.listening import free_port
from appdeck.ingress.haproxy.process import HAProxyFailed, HAProxyProcess, master_reloads

BOUND_S = 60.0
"""Every apply below is bounded by this, while the reload's own deadline is set far past it:
a refusal seen only at the deadline fails the test instead of passing late."""


def _rendered(layout: Layout, marker: str, port: int, *, extra: str = "") -> Rendered:
    config = (
        "global\n"
        f"  stats socket {layout.stats} mode 600 level admin\n"
        f"  description {marker}\n"
        "defaults\n"
        "  mode http\n"
        "  timeout connect 1s\n  timeout client 1s\n  timeout server 1s\n"
        "frontend web\n"
        f"  bind 127.0.0.1:{port}\n"
        f"{extra}"
    )
    return Rendered(config=config, files={}, weights={}, marker=marker)


@pytest.fixture
async def started(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[HAProxyProcess, int]]:
    monkeypatch.setattr(process_module, "READY_WITHIN_S", 3600.0)
    process, port = HAProxyProcess(Layout(run_dir / "reload")), free_port("127.0.0.1")
    async with asyncio.timeout(BOUND_S), process.locked():
        assert await process.apply(_rendered(process.layout, "first", port)) == "started"
    yield process, port
    await process.stop()


async def _reloads(process: HAProxyProcess) -> tuple[int, int]:
    counted = master_reloads(await process.master.command("show proc"))
    assert counted is not None
    return counted


async def test_a_config_the_master_refuses_fails_the_reload_and_the_worker_keeps_serving(
    started: tuple[HAProxyProcess, int], caplog: pytest.LogCaptureFixture
) -> None:
    process, port = started
    before = await _reloads(process)
    broken = _rendered(process.layout, "second", port, extra="  no-such-keyword here\n")
    caplog.set_level(logging.ERROR, "appdeck.ingress.haproxy")
    async with asyncio.timeout(BOUND_S), process.locked():
        with pytest.raises(HAProxyFailed, match="refused the rendered configuration"):
            await process.apply(broken)
    assert "no-such-keyword" in caplog.text  # the reason, from haproxy -c
    assert await process.marker() == "first"
    assert (await _reloads(process))[0] == before[0] + 1  # refused by the master, not a check

    async with asyncio.timeout(BOUND_S), process.locked():
        assert await process.apply(_rendered(process.layout, "third", port)) == "reloaded"
    assert await process.marker() == "third"
    assert (await _reloads(process))[1] == 0


async def test_a_config_that_parses_but_cannot_bind_is_refused_with_haproxy_s_own_log(
    started: tuple[HAProxyProcess, int], caplog: pytest.LogCaptureFixture
) -> None:
    """``haproxy -c`` passes such a config (it binds nothing): the master's failed reload
    is what tells (HAProxy 2.6 keeps no reason for it)."""
    process, port = started
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        extra = f"frontend other\n  bind 127.0.0.1:{busy}\n"
        caplog.set_level(logging.ERROR, "appdeck.ingress.haproxy")
        before = await _reloads(process)
        async with asyncio.timeout(BOUND_S), process.locked():
            with pytest.raises(HAProxyFailed, match="refused the rendered configuration"):
                await process.apply(_rendered(process.layout, "second", port, extra=extra))
    assert (await _reloads(process))[0] == before[0] + 1
    assert "could not bind" in caplog.text or f"{busy}" in caplog.text
    assert await process.marker() == "first"


async def test_a_master_that_does_not_count_failed_reloads_has_each_config_checked_first(
    started: tuple[HAProxyProcess, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    process, port = started
    before = await _reloads(process)
    monkeypatch.setattr(process_module, "master_reloads", lambda proc: None)
    broken = _rendered(process.layout, "second", port, extra="  no-such-keyword here\n")
    async with asyncio.timeout(BOUND_S), process.locked():
        with pytest.raises(HAProxyFailed, match="refused the rendered configuration"):
            await process.apply(broken)
    monkeypatch.undo()
    assert await _reloads(process) == before  # the check refused it: no reload was tried
    assert await process.marker() == "first"


@pytest.mark.parametrize(
    ("answer", "counted"),
    [
        (
            "#<PID>          <type>          <reloads>       <uptime>        <version>\n"
            "8151            master          1 [failed: 1]   0d00h00m01s     2.6.12\n"
            "# workers\n8153            worker          1               0d00h00m01s     2.6.12\n",
            (1, 1),
        ),
        ("1 master 12 [failed: 0] 0d00h00m01s 2.6.12\n", (12, 0)),
        ("8153 worker 1 0d00h00m01s 2.6.12\n", None),  # a worker's line alone
        ("1 master 12 0d00h00m01s 3.9\n", None),  # no failed count: checked first
        ("", None),
    ],
)
def test_the_master_s_reload_counts_are_read_from_its_own_line(
    answer: str, counted: tuple[int, int] | None
) -> None:
    assert master_reloads(answer) == counted
