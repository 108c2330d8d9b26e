"""edge.py's options, files and the sections beside the gate: the metrics frontend (loopback
only, never through an app's hostname), HSTS off by default, hostile option values refused."""

from __future__ import annotations

import ssl
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from appdeck.ingress.haproxy import edge
from tests.ingress.haproxy.edge_harness import running_edge
from tests.support.mcp import free_port


async def test_the_prometheus_exporter_answers_on_loopback_only_not_through_app_hosts(
    tmp_path: Path,
) -> None:
    port = free_port()
    options = edge.EdgeOptions(metrics_port=port)
    async with (
        running_edge(tmp_path, lambda _h, _a: options, maps={"gate": "open 1\n"}) as run,
        httpx.AsyncClient(timeout=5) as client,
    ):
        r = await client.get(f"http://127.0.0.1:{port}/metrics")
        assert r.status_code == 200
        assert "haproxy_process_" in r.text
        assert (await client.get(f"http://127.0.0.1:{port}/")).status_code == 404
        for host in ("shop.localhost", "unknown.example.test"):
            r = await client.get(
                f"http://127.0.0.1:{run.http_port}/metrics", headers={"host": host}
            )
            assert "haproxy_process_" not in r.text
    assert f"bind 127.0.0.1:{port}" in run.config.read_text()


async def test_hsts_is_off_by_default_on_https_answers(tmp_path: Path) -> None:
    def options(https: int, _app: str) -> edge.EdgeOptions:
        return edge.EdgeOptions(https_bind=f"127.0.0.1:{https}", https_port=https)

    async with running_edge(tmp_path, options, maps={"gate": "open 1\n"}) as run:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        async with httpx.AsyncClient(verify=context, timeout=5) as client:
            r = await client.get(
                f"https://127.0.0.1:{run.https_port}/", headers={"host": "shop.localhost"}
            )
        assert r.status_code == 200
        assert "strict-transport-security" not in r.headers
        assert run.app.seen[-1].header(b"x-forwarded-proto") == b"https"


def test_prepare_keeps_what_the_mirror_wrote_and_renews_the_rest(tmp_path: Path) -> None:
    paths = edge.EdgePaths(tmp_path / "edge")
    edge.prepare(paths)
    default = paths.default_cert.read_bytes()
    secret = edge.control_secret(paths)
    paths.map("hosts").write_text("shop.example.test shop\n")
    edge.prepare(paths)
    assert paths.map("hosts").read_text() == "shop.example.test shop\n"
    assert paths.default_cert.read_bytes() == default
    assert edge.control_secret(paths) == secret
    assert len(secret) == 64
    assert paths.secret.stat().st_mode & 0o077 == 0
    assert paths.default_cert.stat().st_mode & 0o077 == 0
    page = paths.page("missing", "json").read_text()
    assert "%[var(txn.route),json(utf8s)]" in page


def test_prepare_rewrites_only_the_pages_and_lua_that_changed(tmp_path: Path) -> None:
    """It runs before every reload: an unchanged page is not written again (same inode),
    a changed or damaged one is restored."""
    paths = edge.EdgePaths(tmp_path / "edge")
    edge.prepare(paths)
    page, lua = paths.page("missing", "json"), paths.lua
    kept, original = page.stat().st_ino, page.read_bytes()
    lua.write_text("-- damaged")
    edge.prepare(paths)
    assert page.stat().st_ino == kept
    assert page.read_bytes() == original
    assert lua.read_text() != "-- damaged"
    assert lua.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    "options",
    [
        {"https_bind": "0.0.0.0:443 crt /etc/shadow"},
        {"https_bind": "127.0.0.1:443\n"},
        {"https_port": 0},
        {"https_port": 2**63},
        {"hsts_seconds": -1},
        {"hsts_seconds": 2**63},
        {"control_host": "Appdeck.example.test"},
        {"control_host": "appdeck.example.test }"},
        {"control_servers": ("127.0.0.1:8080 backup",)},
        {"metrics_port": 70000},
        {"retry_after": -5},
    ],
)
def test_hostile_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r" is "):
        edge.EdgeOptions(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize("root", ["relative/edge", "/tmp/with space", "/tmp/x%y", "/tmp/a\nb"])
def test_an_edge_directory_that_would_break_a_config_line_is_refused(root: str) -> None:
    with pytest.raises(ValueError, match="absolute path"):
        edge.EdgePaths(Path(root))


def test_writers_of_one_file_at_once_each_replace_it_whole(tmp_path: Path) -> None:
    """The replicas of one install share its data plane and may write one map at once (two
    replicas started together did): no writer fails, the file is always one writer's whole
    content, and no temporary file is left."""
    path = tmp_path / "gate.map"
    contents = [bytes([65 + n]) * (1000 + 7919 * n) for n in range(4)]  # lengths differ
    seen: list[bytes] = []

    def write(data: bytes) -> None:
        for _ in range(40):
            edge.write_atomic(path, data)
            seen.append(path.read_bytes())

    with ThreadPoolExecutor(len(contents)) as pool:
        for done in [pool.submit(write, data) for data in contents]:
            done.result()
    assert len(seen) == 40 * len(contents)
    assert all(read in contents for read in seen)
    assert path.read_bytes() in contents
    assert [p.name for p in tmp_path.iterdir()] == ["gate.map"]
