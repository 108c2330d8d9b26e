"""The OpenAPI checks' warm parent (``forked.py``): one parent imports the checkers once, a
child is forked per check, with nothing of the parent's open, killed at its deadline; a dead
parent is replaced at the next check."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

from appdeck.platform.apis.forked import warm_parent
from tests.support.openapi import slow_to_validate

OPTIONS = {"memory": 2 << 30, "cpu": 30}
SMALL = {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {}}


def slow() -> dict[str, Any]:
    return slow_to_validate()


async def check(document: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    child = await warm_parent().spawn("openapi", OPTIONS)
    try:
        async with asyncio.timeout(60):
            out, _ = await child.communicate(json.dumps(document).encode())
    finally:
        child.close()
    return await child.wait(), json.loads(out)


async def test_every_check_is_a_fork_of_one_parent_that_answers_each_alike() -> None:
    first = await check(SMALL)
    parent = warm_parent()._process
    broken = {**SMALL, "paths": {"/x": {"get": {"responses": {"200": {}}}}}}
    assert first == (0, {"error": None})
    code, verdict = await check(broken)
    assert code == 0
    assert verdict["error"][0] == "/paths/~1x/get/responses/200"
    assert warm_parent()._process is parent  # the same parent, imports paid once


async def test_a_child_holds_only_its_three_pipes_and_is_killed_at_its_deadline() -> None:
    child = await warm_parent().spawn("openapi", OPTIONS)
    try:
        write = asyncio.ensure_future(child.communicate(json.dumps(slow()).encode()))
        await asyncio.sleep(0.3)  # reading or validating: either way its descriptors are set
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{child.pid}/fd")) == [0, 1, 2]
        assert os.getsid(child.pid) == child.pid  # a session of its own
        child.kill()
        async with asyncio.timeout(30):
            assert await child.wait() == -signal.SIGKILL
            await write
    finally:
        child.close()
    assert await check(SMALL) == (0, {"error": None})  # the parent serves the next one


async def test_a_killed_parent_is_started_again_by_the_next_check() -> None:
    await check(SMALL)
    parent = warm_parent()._process
    assert parent is not None
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    assert await check(SMALL) == (0, {"error": None})
    assert warm_parent()._process is not parent


async def test_a_child_over_its_memory_cap_fails_with_a_memory_error() -> None:
    # the cap counts the parent's mappings too (~60 MB): 4 MiB leaves nothing to allocate
    child = await warm_parent().spawn("openapi", {"memory": 4 << 20, "cpu": 30})
    try:
        async with asyncio.timeout(60):
            out, err = await child.communicate(json.dumps(slow()).encode())
    finally:
        child.close()
    assert await child.wait() == 1
    assert out == b""
    assert b"MemoryError" in err
