"""The standalone GET stream of a real server, driven with raw HTTP: resumption after
``Last-Event-ID`` (the official client does not expose manual reconnection), 400 and 409."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable

import pytest

from tests.e2e.helpers import TERMINAL, open_get, raw_http, read_events, rpc, sse_headers
from tests.support.appdeck_process import AppDeckProcess
from tests.support.mcp import Event, initialize

GET_EVENT_ID = re.compile(r"^g\.(\d+)$")


def _seq(event_id: str | None) -> int:
    assert event_id is not None
    found = GET_EVENT_ID.match(event_id)
    assert found, f"not an event id of the GET stream: {event_id!r}"
    return int(found.group(1))


def _status_notifications(events: list[Event]) -> list[dict[str, object]]:
    return [json.loads(e.data)["params"] for e in events if e.data]


def _completed(task_ids: set[str]) -> Callable[[list[Event]], bool]:
    def check(events: list[Event]) -> bool:
        done = {
            p["taskId"] for p in _status_notifications(events) if p.get("status") == "completed"
        }
        return task_ids <= done

    return check


@pytest.mark.e2e
async def test_a_get_resumed_after_last_event_id_replays_every_missed_task_status_notification(
    appdeck: AppDeckProcess,
) -> None:
    async with asyncio.timeout(120), raw_http(appdeck) as http:
        sid = await initialize(http)

        # 1. a fresh GET starts with a priming event (id + retry, empty data); then disconnect
        async with open_get(http, sse_headers(sid)) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            first = await read_events(response, until=lambda ev: len(ev) >= 1, within=30)
        assert len(first) == 1, first
        priming = first[0]
        assert priming.data == ""
        assert priming.retry is not None
        primed_at = _seq(priming.id)

        # 2. while no GET is connected, three tasks finish: their notifications/tasks/status
        #    go to the session's GET stream log
        task_ids: set[str] = set()
        for n in range(3):
            reply = await rpc(
                http,
                sid,
                "tools/call",
                {"name": "appdeck_test_sleep", "arguments": {"seconds": 0}, "task": {}},
                id=10 + n,
            )
            assert reply["result"]["task"]["status"] == "working", reply
            task_ids.add(reply["result"]["task"]["taskId"])
        assert len(task_ids) == 3
        async with asyncio.timeout(60):
            for task_id in task_ids:
                while True:
                    got = await rpc(http, sid, "tasks/get", {"taskId": task_id}, id=20)
                    if got["result"]["status"] in TERMINAL:
                        assert got["result"]["status"] == "completed", got
                        break
                    await asyncio.sleep(0.05)

        # 3. resume after the priming id: every missed notification, in order, once
        async with open_get(http, sse_headers(sid, last_event_id=priming.id)) as response:
            assert response.status_code == 200, await response.aread()
            # once all three are in, keep listening a little: a duplicate would show up then
            replayed = await read_events(
                response, until=_completed(task_ids), settle=0.5, within=30
            )

        assert replayed, "nothing was replayed"
        assert all(e.data for e in replayed), "a resumed stream must not re-prime"
        seqs = [_seq(e.id) for e in replayed]
        assert all(s > primed_at for s in seqs), (primed_at, seqs)
        assert seqs == sorted(seqs), seqs
        ids = [priming.id, *(e.id for e in replayed)]
        assert len(ids) == len(set(ids)), f"event ids repeat: {ids}"

        methods = {json.loads(e.data)["method"] for e in replayed}
        assert methods == {"notifications/tasks/status"}, methods
        notifications = _status_notifications(replayed)
        assert {n["taskId"] for n in notifications} == task_ids
        pairs = Counter((n["taskId"], n["status"]) for n in notifications)
        assert all(count == 1 for count in pairs.values()), f"duplicates: {pairs}"
        for task_id in task_ids:
            mine = [n["status"] for n in notifications if n["taskId"] == task_id]
            assert mine[-1] == "completed", (task_id, mine)

        # 4. resuming after the last received id replays nothing old
        async with open_get(http, sse_headers(sid, last_event_id=replayed[-1].id)) as response:
            assert response.status_code == 200, await response.aread()
            again = await read_events(response, within=0.75)
        assert again == [], again


@pytest.mark.e2e
async def test_a_get_with_a_malformed_last_event_id_is_rejected_with_400(
    appdeck: AppDeckProcess,
) -> None:
    async with asyncio.timeout(15), raw_http(appdeck) as http:
        sid = await initialize(http)
        for bad in ("not-an-event-id", "g.", "g.-1", "g.1.x/../2"):
            r = await http.get("/mcp", headers=sse_headers(sid, last_event_id=bad))
            assert r.status_code == 400, (bad, r.status_code, r.text)
            body = r.json()
            assert body["jsonrpc"] == "2.0"
            assert isinstance(body["error"]["code"], int), body


@pytest.mark.e2e
async def test_a_second_concurrent_standalone_get_is_rejected_with_409(
    appdeck: AppDeckProcess,
) -> None:
    async with asyncio.timeout(60), raw_http(appdeck) as http:
        sid = await initialize(http)
        async with open_get(http, sse_headers(sid)) as first:
            assert first.status_code == 200
            # once the priming event is here the first GET surely holds the stream
            primed = await read_events(first, until=lambda ev: len(ev) >= 1, within=30)
            assert primed, "no priming event"
            second = await http.get("/mcp", headers=sse_headers(sid))
            assert second.status_code == 409, (second.status_code, second.text)
            assert isinstance(second.json()["error"]["code"], int)
