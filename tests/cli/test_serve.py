"""`appdeck serve` as a newcomer meets it, through a real process: a busy port is one line
naming the port and the option; a data dir nobody can sign in to says how to fix that; the
connect-a-client block; the activity lines in the server log (and no driver chatter at debug);
one version string."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import appdeck
from appdeck.auth.bearer import PAT_PREFIX
from tests.support.appdeck_process import (
    AppDeckProcess,
    appdeck_executable,
    clean_env,
    start_appdeck,
)
from tests.support.mcp import headers, initialize, request

LOGGER = re.compile(r"\[([\w.]+)\]\s*$")


@pytest.fixture
def busy_port() -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def _serve(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(appdeck_executable()), "serve", "--data-dir", str(tmp_path / "data"), *options],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _cli(data_dir: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(appdeck_executable()), *args, "--data-dir", str(data_dir)],
        env=clean_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_busy_control_plane_port_is_one_line_naming_it_and_the_option(
    tmp_path: Path, busy_port: int
) -> None:
    done = _serve(tmp_path, "--port", str(busy_port), "--ingress-port", "0")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"appdeck serve: port {busy_port} is already in use on 127.0.0.1: choose another with "
        "--port or APPDECK_PORT (0 picks a free one)"
    ]


def test_a_busy_ingress_port_is_one_line_naming_it_and_the_option(
    tmp_path: Path, busy_port: int
) -> None:
    done = _serve(tmp_path, "--port", "0", "--ingress-port", str(busy_port))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"appdeck serve: ingress port {busy_port} is already in use on 127.0.0.1: choose "
        "another with --ingress-port or APPDECK_INGRESS_PORT (0 picks a free one)"
    ]


async def _printed(server: AppDeckProcess) -> str:
    """Everything the server prints at start: it serves only once it has printed it all."""
    async with httpx.AsyncClient(base_url=server.origin, timeout=5) as http:
        assert (await http.get("/healthz")).status_code == 200
    return server.stdout_path.read_text()


async def _printed_without_dev(data: Path, log_dir: Path) -> tuple[str, str]:
    server = await start_appdeck(data, log_dir=log_dir, dev=False, fresh_process=True)
    try:
        return await _printed(server), server.url
    finally:
        await server.stop()


async def test_a_data_dir_nobody_can_sign_in_to_says_how_to_create_a_user(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    printed, url = await _printed_without_dev(data, tmp_path / "logs")
    assert "Nobody can sign in yet" in printed
    assert f"appdeck tenant create acme --data-dir {data}" in printed
    assert f"claude mcp add --transport http appdeck {url}\n" in printed
    assert "Bearer" not in printed.split("Claude Code:")[1].splitlines()[0]

    _cli(data, "tenant", "create", "acme")
    _cli(data, "user", "create", "--tenant", "acme", "--name", "alice", "--password-stdin",
         stdin="a long enough password\n")  # fmt: skip
    printed, _ = await _printed_without_dev(data, tmp_path / "logs2")
    assert "Connect a client" in printed
    assert "Nobody can sign in yet" not in printed


async def test_dev_prints_a_connect_block_logs_activity_and_says_one_version(
    tmp_path: Path,
) -> None:
    server = await start_appdeck(
        tmp_path / "data",
        log_dir=tmp_path / "logs",
        env={"APPDECK_LOG_LEVEL": "debug"},
        fresh_process=True,  # the command as installed: what `make run` starts
    )
    try:
        printed = await _printed(server)
        token = server.token
        assert token
        assert (
            f'claude mcp add --transport http appdeck {server.url} --header "Authorization: '
            f'Bearer {token}"' in printed
        )
        entry = json.loads(next(ln for ln in printed.splitlines() if '"mcpServers"' in ln))
        assert entry["mcpServers"]["appdeck"]["headers"] == {"Authorization": f"Bearer {token}"}
        assert f"AppDeck {appdeck.__version__} MCP server listening on" in printed
        assert f"Console (sign in with a user's password): {server.origin}/console" in printed

        async with httpx.AsyncClient(base_url=server.origin, timeout=10) as http:
            assert (await http.get("/healthz")).json()["version"] == appdeck.__version__
            init = await http.post(
                "/mcp",
                json=request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "t", "version": "1"}}),
                headers=headers(token=token),
            )  # fmt: skip
            assert init.json()["result"]["serverInfo"]["version"] == appdeck.__version__
            sid = await initialize(http, token)
            call = {"name": "test_simple_text", "arguments": {"password": "hunter2-secret"}}
            r = await http.post(
                "/mcp", json=request("tools/call", call), headers=headers(sid, token)
            )
            assert r.status_code == 200
            await _revoke_a_pat_by_holding_it(http, server)
        log = await _log_with(server, "token revoked kind=pat")
    finally:
        await server.stop()
    assert re.search(r"tool call tool=test_simple_text action=- app=- outcome=ok ms=[\d.]+ "
                     r"tenant=dev user=\w+", log), log  # fmt: skip
    assert "token issued kind=oauth tenant=dev" in log  # the dev token
    assert "APPDECK_TEST_FAST_PASSWORD_HASHES is set: passwords are hashed with test-only" in log
    assert token not in log
    assert "hunter2" not in log
    loggers = {m.group(1) for ln in log.splitlines() if (m := LOGGER.search(ln))}
    assert "appdeck.activity" in loggers
    assert all(name.startswith("appdeck") for name in loggers), loggers


async def _revoke_a_pat_by_holding_it(http: httpx.AsyncClient, server: AppDeckProcess) -> None:
    """A PAT is revoked through /revoke by whoever holds it, and refused at once after."""
    created = _cli(
        server.data_dir, "token", "create", "--tenant", "dev", "--user", "dev",
        "--scope", "apps:read", "--json",
    )  # fmt: skip
    pat = json.loads(created)["token"]
    assert pat.startswith(PAT_PREFIX)
    sid = await initialize(http, pat)
    ping = request("ping")
    assert (await http.post("/mcp", json=ping, headers=headers(sid, pat))).status_code == 200
    assert (await http.post("/revoke", data={"token": pat})).status_code == 200
    after = await http.post("/mcp", json=request("tools/list"), headers=headers(sid, pat))
    assert after.status_code == 401  # at once: well within APPDECK_AUTH_TRUST_SECONDS


async def _log_with(server: AppDeckProcess, text: str, within: float = 10.0) -> str:
    async with asyncio.timeout(within):
        while text not in (log := server.stderr_path.read_text()):  # noqa: ASYNC110 - a file
            await asyncio.sleep(0.05)
    return log


def test_kubernetes_with_an_api_server_that_does_not_answer_is_one_line_and_nothing_starts(
    tmp_path: Path,
) -> None:
    from tests.test_kube_setup import kubeconfig

    with socket.socket() as sock:  # a port nothing listens on: the connection is refused
        sock.bind(("127.0.0.1", 0))
        server = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = kubeconfig(tmp_path / "kubeconfig", server)
    done = subprocess.run(
        [str(appdeck_executable()), "serve", "--data-dir", str(tmp_path / "data"), "--port", "0"],
        env=clean_env()
        | {
            "APPDECK_RUNTIME": "kubernetes",
            "APPDECK_KUBE_CONFIG": str(config),
            "APPDECK_KUBE_IMAGE": "registry.local/appdeck-base:1",
            "APPDECK_KUBE_SOURCE_URL": "http://appdeck.appdeck-system.svc:8080",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"appdeck serve: invalid setting APPDECK_KUBE_CONFIG: the API server at {server} "
        "does not answer: "
    ), line
    assert not (tmp_path / "data" / "appdeck.db").exists()  # refused before opening anything


def test_kubernetes_with_replicas_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(appdeck_executable()), "serve", "--data-dir", str(tmp_path / "data"), "--port", "0"],
        env=clean_env()
        | {
            "APPDECK_RUNTIME": "kubernetes",
            "APPDECK_REDIS_URL": "redis://127.0.0.1:6379/0",
            "APPDECK_DATABASE_URL": "postgresql+asyncpg://postgres@127.0.0.1:5432/never_opened",
            "APPDECK_SECRET_KEY": "k" * 64,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "appdeck serve: invalid setting APPDECK_REDIS_URL: is not served with "
        "APPDECK_RUNTIME=kubernetes yet (docs/kubernetes.md)"
    ]


# --- automatic TLS (issue 21 §3) ------------------------------------------------------------


def test_a_tls_key_that_does_not_match_its_certificate_is_one_line_and_nothing_starts(
    tmp_path: Path,
) -> None:
    from tests.platform.tls.test_pem import self_signed

    cert, _ = self_signed(tmp_path / "a", ["appdeck.example.test"])
    _, key = self_signed(tmp_path / "b", ["appdeck.example.test"])
    done = subprocess.run(
        [str(appdeck_executable()), "serve", "--data-dir", str(tmp_path / "data"), "--port", "0"],
        env=clean_env() | {"APPDECK_TLS_CERT": str(cert), "APPDECK_TLS_KEY": str(key)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["appdeck serve: the key does not match APPDECK_TLS_CERT"]
    assert not (tmp_path / "data" / "appdeck.db").exists()  # refused before opening anything


async def test_serve_obtains_the_public_hosts_certificate_from_the_acme_ca(tmp_path: Path) -> None:
    from tests.support.challtestsrv import challtestsrv
    from tests.support.mcp import free_port
    from tests.support.pebble import pebble

    ingress_port = free_port()
    async with (
        challtestsrv() as dns,
        pebble(tmp_path, http_port=ingress_port, dns=dns.dns_address) as ca,
    ):
        env = {
            "APPDECK_PUBLIC_URL": "http://appdeck.example.test",  # its host is what counts
            "APPDECK_ACME_DIRECTORY": ca.directory,
            "APPDECK_ACME_CA_BUNDLE": str(ca.ca_bundle),
            "APPDECK_ACME_EMAIL": "ops@example.test",
        }
        server = await start_appdeck(
            tmp_path / "data", log_dir=tmp_path, env=env, ingress_port=ingress_port
        )
        try:
            issued = 'appdeck_tls_certificates{state="issued"} 1.0'
            async with httpx.AsyncClient(base_url=server.origin, timeout=5) as http:
                seen = ""

                async def poll() -> None:
                    nonlocal seen
                    seen = (await http.get("/metrics")).text

                async with asyncio.timeout(60):  # a bound for a loaded machine, not a speed
                    while issued not in seen:
                        await poll()
                        await asyncio.sleep(0.2)
            assert (
                "certificate appdeck.example.test issued by Pebble"
                in server.stderr_path.read_text() + server.stdout_path.read_text()
            )
        finally:
            await server.stop()
