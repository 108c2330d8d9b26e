"""Runtime detection over a checked-out tree: each rule, their order, and hostile trees
(links, huge or binary files, deep JSON, control characters) refused clearly and boundedly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.platform.imports.detect import detect
from appdeck.platform.imports.service import app_name_from


def _tree(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(exist_ok=True)
    for name, content in files.items():
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


@pytest.mark.parametrize(
    ("files", "runtime", "command"),
    [
        (
            {"Procfile": "web: gunicorn app:app\n", "requirements.txt": ""},
            "python",
            "gunicorn app:app",
        ),
        ({"Procfile": "worker: x\nweb:node s.js", "package.json": "{}"}, "node", "node s.js"),
        ({"Procfile": "web: ./serve"}, "command", "./serve"),
        ({"package.json": '{"scripts": {"start": "node index.js"}}'}, "node", "npm start"),
        ({"package.json": '{"main": "lib/server.js"}'}, "node", "node lib/server.js"),
        ({"requirements.txt": "flask\n", "app.py": ""}, "python", "python3 app.py"),
        ({"pyproject.toml": "", "main.py": ""}, "python", "python3 main.py"),
        ({"app.py": "", "index.html": ""}, "python", "python3 app.py"),
        ({"index.html": "<h1>hi</h1>"}, "static", None),
        ({"Procfile": "release: migrate\n", "index.html": ""}, "static", None),
    ],
)
def test_each_rule_in_its_order(
    tmp_path: Path, files: dict[str, str], runtime: str, command: str | None
) -> None:
    found = detect(_tree(tmp_path / "t", files))
    assert (found.runtime, found.run_command) == (runtime, command)
    assert found.reasons


def test_a_tree_with_nothing_to_run_says_what_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition, match=r"Procfile web line, package\.json"):
        detect(_tree(tmp_path / "t", {"README.md": "hi"}))


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"Procfile": "web: " + "x" * 20_000}, "larger than 16 KiB"),
        ({"Procfile": "web: run\x1b[2J"}, "control characters"),
        ({"Procfile": b"web: \xff\xfe"}, "not UTF-8"),
        ({"package.json": "[" * 100_000}, "not valid JSON"),
        ({"package.json": "[1, 2]"}, "not a JSON object"),
        ({"package.json": '{"main": "../../etc/passwd"}'}, "plain relative path"),
        ({"package.json": '{"main": "/abs.js"}'}, "plain relative path"),
        ({"package.json": '{"scripts": {"start": "' + "y" * 2000 + '"}}'}, "longer than"),
        ({"package.json": " " * (300 * 1024)}, "larger than 256 KiB"),
    ],
)
def test_hostile_files_are_refused_clearly(
    tmp_path: Path, files: dict[str, str | bytes], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        detect(_tree(tmp_path / "t", files))


def test_links_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"main": "stolen.js"}')
    root = _tree(tmp_path / "t", {"index.html": ""})
    os.symlink(secret, root / "package.json")
    os.symlink("/etc/passwd", root / "Procfile")
    found = detect(root)  # the links are not files: static, from index.html
    assert (found.runtime, found.run_command) == ("static", None)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://github.com/octo/My_Shop.git", "my-shop"),
        ("/srv/git/hello.git/", "hello"),
        ("file:///x/---.git", "app"),
        ("https://h/o/" + "a" * 80, "a" * 40),
        ("https://h/o/ünïcode", "n-code"),
    ],
)
def test_app_names_come_from_the_repository_name(url: str, name: str) -> None:
    assert app_name_from(url) == name


@pytest.mark.parametrize(
    ("files", "path"),
    [
        ({"app.py": '@app.get("/healthz")\n@app.get("/health")\n'}, "/healthz"),
        ({"app.py": "import x\n", "routes.py": "route('/health', ok)\n"}, "/health"),
        ({"package.json": '{"main": "s.js"}', "s.js": "app.get(`/healthz`, ok)"}, "/healthz"),
        ({"app.py": "# no route of that name: /healthz in a comment\n"}, None),
        ({"index.html": '<a href="/healthz">'}, None),
    ],
)
def test_the_health_path_is_the_route_the_sources_name(
    tmp_path: Path, files: dict[str, str], path: str | None
) -> None:
    found = detect(_tree(tmp_path / "t", files))
    assert found.health_path == path
    assert found.spec().get("health_check") == ({"path": path} if path else None)


def test_a_linked_source_is_not_read_for_the_health_path(tmp_path: Path) -> None:
    outside = _tree(tmp_path / "outside", {"secret.py": 'x = "/healthz"'})
    root = _tree(tmp_path / "t", {"app.py": ""})
    os.symlink(outside / "secret.py", root / "linked.py")
    assert detect(root).health_path is None
