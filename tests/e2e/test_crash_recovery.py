"""A server killed with SIGKILL while a task runs, restarted on the same data directory."""

from __future__ import annotations

import asyncio

import pytest
from mcp import MCPError

from tests.e2e.conftest import Launcher
from tests.e2e.helpers import Inbox, get_task, official_client, raw_http, rpc, task_result
from tests.support.mcp import initialize


@pytest.mark.e2e
async def test_a_task_cut_short_by_a_crash_is_failed_after_restart_and_its_result_does_not_hang(
    launch_appdeck: Launcher,
) -> None:
    async with asyncio.timeout(240):  # two server starts at load 14 took over 40 s (issue 20)
        first = await launch_appdeck()
        async with raw_http(first) as http:
            sid = await initialize(http)
            reply = await rpc(
                http,
                sid,
                "tools/call",
                {"name": "appdeck_test_sleep", "arguments": {"seconds": 30}, "task": {}},
                id=2,
            )
            task_id = reply["result"]["task"]["taskId"]
            assert reply["result"]["task"]["status"] == "working", reply
            got = await rpc(http, sid, "tasks/get", {"taskId": task_id}, id=3)
            assert got["result"]["status"] == "working", got

        assert await first.kill() != 0  # kill -9: no shutdown code runs

        # same data directory, new process, new port (read from its own URL line)
        second = await launch_appdeck(data_dir=first.data_dir)
        inbox = Inbox()
        async with official_client(second, inbox) as client:
            status = await get_task(client, task_id)
            assert status.status == "failed", status
            assert status.status_message is not None
            assert "restart" in status.status_message.lower(), status.status_message

            # the SDK's own read timeout is far away: an error within 60 s is the server's
            # answer, and a tasks/result that waits for a task nobody runs fails TimeoutError
            with pytest.raises(MCPError) as failure:
                async with asyncio.timeout(60):
                    await task_result(client, task_id, read_timeout=300)
            assert failure.value.message, failure.value.error
        assert inbox.errors == []
