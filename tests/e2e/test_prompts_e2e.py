"""The workflow prompts through a real ``appdeck serve`` and the official MCP client: listed,
got, the ship_directory prompt followed step by step (inline files deployed as a task,
preflight, the URL answering through the ingress), then add_table_and_api_key's (a table with
a row, a key, the URL guarded by it)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import mcp.types as types
import pytest
from mcp import Client, MCPError

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import (
    Inbox,
    call_tool_as_task,
    official_client,
    task_result,
    through_ingress,
)
from tests.support.prompt_calls import calls

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
WORKFLOWS = {"ship_directory", "set_up_ci_and_auto_deploy", "add_table_and_api_key"}


async def _text(client: Client, name: str, arguments: dict[str, str]) -> str:
    got = await client.get_prompt(name, arguments)
    [message] = got.messages
    assert isinstance(message.content, types.TextContent), message
    return message.content.text


_LEFT_OUT = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__"})
"""What the prompt says to leave out that a directory here can hold (Python's bytecode, once
the fixture app has run from it)."""


def _files(root: Path) -> list[dict[str, Any]]:
    """The directory as the prompt asks: each file's relative path and text."""
    return [
        {"path": p.relative_to(root).as_posix(), "content": p.read_text()}
        for p in sorted(root.rglob("*"))
        if p.is_file() and _LEFT_OUT.isdisjoint(p.relative_to(root).parts)
    ]


async def _ok(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, (name, result.content)
    assert result.structured_content is not None
    return dict(result.structured_content)


async def _follow_the_data_prompt(client: Client, text: str, app_id: int, url: str) -> None:
    """add_table_and_api_key's steps as an agent takes them: the table made and checked with
    a row, a key created, the app made to require one, and the URL refusing a request without
    it and answering with it. (The step that changes the app's code to use the table is the
    agent's own; discover_apis and test_api are for apps with an OpenAPI document.)"""
    steps = calls(text, app_id)
    named = [name for name, _ in steps]
    assert named[:7] == [
        "manage_table",
        "records",
        "records",
        "manage_api_key",
        "set_app_spec",
        "get_app_url",
        "discover_apis",
    ], named
    made = await _ok(client, *steps[0])
    assert [c["name"] for c in made["columns"]][-2:] == ["title", "done"], made
    await _ok(client, *steps[1])
    listed = await _ok(client, *steps[2])
    assert [row["title"] for row in listed["rows"]] == ["<a value>"], listed
    key = (await _ok(client, *steps[3]))["api_key"]
    await _ok(client, *steps[4])
    assert (await _ok(client, *steps[5]))["url"] == url
    async with httpx.AsyncClient(timeout=10) as http:
        request = through_ingress(url)
        async with asyncio.timeout(60):  # the ingress takes the new spec within moments
            while (await http.get(**request)).status_code != 401:  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(0.2)
        keyed = await http.get(request["url"], headers={**request["headers"], "x-api-key": key})
        assert keyed.status_code == 200, keyed.text
        assert keyed.json()["version"] == "v1"


@pytest.mark.e2e
async def test_the_official_client_ships_a_directory_by_following_the_prompt(
    launch_appdeck: Launcher,
) -> None:
    server = await launch_appdeck()
    inbox = Inbox()
    async with asyncio.timeout(240), official_client(server, inbox) as client:
        listed = {p.name for p in (await client.list_prompts()).prompts}
        assert WORKFLOWS | {"deploy_app_safely", "debug_failed_deploy"} <= listed

        text = await _text(client, "ship_directory", {"name": "hello", "directory": str(HELLO)})
        assert "hello does not exist yet" in text
        steps = calls(text)
        assert [name for name, _ in steps] == [
            "import_and_deploy",
            "preflight_check",
            "deploy_app",
            "get_app_url",
        ]

        # 1-2: the directory's files, sent as the prompt says, as a task
        name, arguments = steps[0]
        created = await call_tool_as_task(client, name, {**arguments, "files": _files(HELLO)})
        result = await task_result(client, created.task.task_id, read_timeout=180)
        assert not result.is_error, result.content
        shipped = result.structured_content
        assert shipped is not None
        assert shipped["deployment"]["state"] == "live", shipped
        assert shipped["push_url"].endswith("/git/dev/hello.git")
        app_id = shipped["app_id"]

        # 3: preflight (nothing fails: the import's own preflight passed), 4: the URL answers
        steps = calls(text, app_id)
        checks = await _ok(client, "preflight_check", steps[1][1])
        assert checks["verdict"] != "fail", checks
        url = (await _ok(client, "get_app_url", steps[3][1]))["url"]
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(**through_ingress(url))
        assert answer.status_code == 200, answer.text
        assert answer.json()["version"] == "v1"

        # the prompts now see the live app
        again = await _text(client, "ship_directory", {"name": "hello"})
        assert f"hello exists (app_id {app_id}" in again
        assert "deployment #1 is live" in again
        ci = await _text(client, "set_up_ci_and_auto_deploy", {"app_id": str(app_id)})
        assert "connected to hosted (branch main)" in ci
        assert "manage_ci" in ci
        data = await _text(
            client,
            "add_table_and_api_key",
            {"app_id": str(app_id), "table": "todos", "columns": "title:text, done:boolean"},
        )
        assert "deployment #1 is live" in data
        await _follow_the_data_prompt(client, data, app_id, url)
        with pytest.raises(MCPError) as refused:
            await client.get_prompt("ship_directory", {"name": "Not A Name"})
        assert refused.value.code == -32602
        assert refused.value.data["code"] == "invalid_argument"

        await _ok(client, "manage_app", {"app_id": app_id, "action": "delete", "confirm": True})
    assert inbox.errors == []


async def _git(*argv: str, cwd: Path) -> str:
    ran = await asyncio.create_subprocess_exec(
        "git", "-C", str(cwd), "-c", "user.name=dev", "-c", "user.email=dev@example.test", *argv,
        env={"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
             "GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await ran.communicate()
    assert ran.returncode == 0, (argv, out.decode(errors="replace"))
    return out.decode(errors="replace")


def _step(steps: list[tuple[str, dict[str, Any]]], name: str, action: str) -> dict[str, Any]:
    return next(a for n, a in steps if n == name and a.get("action") == action)


@pytest.mark.e2e
async def test_the_official_client_sets_up_ci_and_auto_deploy_by_following_the_prompt(
    launch_appdeck: Launcher, tmp_path: Path
) -> None:
    """set_up_ci_and_auto_deploy followed: CI configured with auto_deploy, the head tested as
    a task, then a push to the hosted remote tested and deployed by itself."""
    server = await launch_appdeck()
    inbox = Inbox()
    async with asyncio.timeout(420), official_client(server, inbox) as client:
        created = await call_tool_as_task(
            client, "import_and_deploy", {"name": "hello", "files": _files(HELLO)}
        )
        shipped = await task_result(client, created.task.task_id, read_timeout=180)
        assert not shipped.is_error, shipped.content
        assert shipped.structured_content is not None
        app_id = shipped.structured_content["app_id"]
        push_url = shipped.structured_content["push_url"]

        text = await _text(
            client,
            "set_up_ci_and_auto_deploy",
            {"app_id": str(app_id), "test_command": "test -f app.py"},
        )
        assert "connected to hosted (branch main)" in text
        steps = calls(text, app_id)
        configured = await _ok(client, "manage_ci", _step(steps, "manage_ci", "configure"))
        assert configured["config"]["auto_deploy"] is True, configured
        started = await call_tool_as_task(client, "manage_ci", _step(steps, "manage_ci", "trigger"))
        head = await task_result(client, started.task.task_id, read_timeout=180)
        assert not head.is_error, head.content
        assert head.structured_content is not None
        assert head.structured_content["run"]["state"] == "passed", head.structured_content

        # prove the loop: a commit pushed to the hosted remote is tested, then deployed
        assert push_url.startswith("http://"), push_url
        remote = push_url.replace("http://", f"http://git:{server.token}@", 1)
        work = tmp_path / "clone"
        await _git("clone", "-q", remote, str(work), cwd=tmp_path)
        app_py = (work / "app.py").read_text()
        label = '"APP_VERSION_LABEL", "v1"'
        assert label in app_py
        (work / "app.py").write_text(app_py.replace(label, '"APP_VERSION_LABEL", "v2"'))
        await _git("commit", "-qam", "v2", cwd=work)
        await _git("push", "-q", remote, "HEAD:main", cwd=work)
        while True:
            runs = await _ok(client, "manage_ci", _step(steps, "manage_ci", "runs"))
            pushed = runs["runs"][0]
            if pushed["trigger"] == "push" and pushed["deployment"] is not None:
                break
            await asyncio.sleep(0.2)
        assert pushed["state"] == "passed", runs
        while True:
            listed = await _ok(client, "list_deployments", {"app_id": app_id})
            newest = listed["deployments"][0]
            if newest["done"]:
                break
            await asyncio.sleep(0.2)
        assert (newest["number"], newest["state"]) == (pushed["deployment"], "live"), listed
        url = (await _ok(client, "get_app_url", {"app_id": app_id}))["url"]
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(**through_ingress(url))
        assert answer.json()["version"] == "v2", answer.text
    assert inbox.errors == []
