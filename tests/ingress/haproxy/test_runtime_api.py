"""The runtime API client against a real HAProxy (Debian's, installed by ``make``)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appdeck.ingress.haproxy.runtime_api import RuntimeApi, RuntimeApiError, refused
from tests.support.mcp import free_port

CONFIG = """global
  stats socket {stats} mode 600 level admin
defaults
  mode http
  timeout connect 5s
  timeout client 5s
  timeout server 5s
frontend f
  bind 127.0.0.1:{port}
  default_backend b
backend b
  server s1 127.0.0.1:9 weight 10
  server s2 127.0.0.1:10 weight 10
"""


@pytest.fixture
async def haproxy(tmp_path: Path) -> AsyncIterator[tuple[RuntimeApi, RuntimeApi]]:
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    stats, master = tmp_path / "stats.sock", tmp_path / "master.sock"
    config = tmp_path / "haproxy.cfg"
    config.write_text(CONFIG.format(stats=stats, port=free_port()))
    process = await asyncio.create_subprocess_exec(
        binary, "-W", "-S", str(master), "-f", str(config), stderr=asyncio.subprocess.DEVNULL
    )
    try:
        apis = RuntimeApi(stats), RuntimeApi(master, master=True)
        async with asyncio.timeout(30):  # both sockets listening (a bound, not a speed)
            for api in apis:
                while True:
                    try:
                        await api.command("show info" if api is apis[0] else "show proc")
                        break
                    except RuntimeApiError:
                        await asyncio.sleep(0.05)
        yield apis
    finally:
        process.terminate()
        async with asyncio.timeout(10):
            await process.wait()


async def test_a_command_is_answered_and_a_refusal_raises(
    haproxy: tuple[RuntimeApi, RuntimeApi],
) -> None:
    stats, _ = haproxy
    assert await stats.command("set server b/s1 weight 50") == "\n"
    assert (await stats.command("get weight b/s1")).startswith("50 (initial 10)")
    with pytest.raises(RuntimeApiError, match="No such server"):
        await stats.command("set server b/nope weight 1")


async def test_silent_commands_go_in_one_batch_and_any_answer_is_a_refusal(
    haproxy: tuple[RuntimeApi, RuntimeApi],
) -> None:
    stats, _ = haproxy

    await stats.commands(["set server b/s1 weight 3", "set server b/s2 weight 0"])

    state = await stats.command("show servers state b")
    weights = {f[3]: f[7] for f in (line.split() for line in state.splitlines()[2:]) if len(f) > 7}
    assert weights == {"s1": "3", "s2": "0"}
    with pytest.raises(RuntimeApiError, match="No such server"):
        await stats.commands(["set server b/s1 weight 4", "set server b/nope weight 1"])
    with pytest.raises(ValueError, match="one line without ';'"):
        await stats.commands(["set server b/s1 weight 4; shutdown frontend f"])
    await stats.commands([])


async def test_a_question_and_silent_commands_share_one_connection_each_answer_apart(
    haproxy: tuple[RuntimeApi, RuntimeApi],
) -> None:
    stats, _ = haproxy

    info, said = await stats.asked_then(
        "show info", ["set server b/s1 weight 7", "set server b/s2 weight 0"]
    )

    assert info.startswith("Name: HAProxy")
    assert said == []
    state = await stats.command("show servers state b")
    weights = {f[3]: f[7] for f in (line.split() for line in state.splitlines()[2:]) if len(f) > 7}
    assert weights == {"s1": "7", "s2": "0"}
    info, said = await stats.asked_then(
        "show info", ["set server b/nope weight 1", "set server b/s1 weight 300"]
    )
    assert "Nbthread" in info
    assert said == ["No such server.", "Absolute weight can only be between 0 and 256 inclusive."]
    with pytest.raises(RuntimeApiError, match="Unknown command"):
        await stats.asked_then("show nonsense", [])


async def test_the_master_socket_answers_and_closes(haproxy: tuple[RuntimeApi, RuntimeApi]) -> None:
    _, master = haproxy
    answer = await master.command("show proc")
    assert "master" in answer
    assert "worker" in answer


@pytest.mark.parametrize("line", ["show info\nshutdown", "show info; shutdown", "a\x00b"])
async def test_a_command_line_carries_exactly_one_command(line: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one line"):
        await RuntimeApi(tmp_path / "none.sock").command(line)


async def test_an_absent_socket_is_an_error_not_a_hang(tmp_path: Path) -> None:
    with pytest.raises(RuntimeApiError, match="did not answer"):
        await RuntimeApi(tmp_path / "none.sock", timeout_s=2).command("show info")


def test_an_answer_that_echoes_a_name_like_error_is_no_refusal() -> None:
    # hosts and routes named like refusals, as ``get map``/``show map``/crt-list echo them
    for echoed in (
        'type=str, unique=0, case=1, found=yes, idx=tree, key="error-pages.example.com", '
        'value="shop", type="str", value="shop"',
        "0x55d1c1b0 invalid-shop.example.com shop--acme",
        "0x55d1c1b0 unable.example.com no-such-app--acme",
        "/run/appdeck/x/edge/certs/failed.example.com.pem:0",
        "no-such-app--acme unknown",
    ):
        assert not refused(echoed), echoed
    for refusal in (
        "No such server.",
        "Unknown command. Please enter one of the following commands only :",
        "'set map' expects three parameters: map identifier, key and value.",
        "Entry not found.",
        "Can't create a new ssl cert: already exists",
        "Permission denied",
        "Missing certificate name.",
    ):
        assert refused(refusal), refusal
