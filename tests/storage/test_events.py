"""SqlEventLog: what each session's streams carried, for replay."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from appdeck.events.ports import StoredEvent
from appdeck.storage import SqlEventLog, Storage


async def test_append_returns_the_database_assigned_seq_and_replay_gives_the_event_back(
    storage: Storage,
) -> None:
    payload = '{"jsonrpc":"2.0","method":"notifications/message","params":{"t":"héllo ✓"}}'
    event = await storage.events.append("s1", "get", payload.encode())

    assert event == StoredEvent("s1", "get", event.seq, payload.encode())
    assert event.seq > 0
    assert await storage.events.replay("s1", "get", 0) == [event]


async def test_seqs_are_unique_and_increasing_across_sessions_and_streams(
    storage: Storage,
) -> None:
    seqs = []
    for n in range(6):
        event = await storage.events.append(f"s{n % 2}", f"stream{n % 3}", b"{}")
        seqs.append(event.seq)
    assert seqs == sorted(set(seqs))


async def test_append_many_appends_in_item_order_in_one_go(storage: Storage) -> None:
    items = [("s1", "get", b'{"n":1}'), ("s2", "get", b'{"n":2}'), ("s1", "post-1", b'{"n":3}')]

    events = await storage.events.append_many(items)

    assert [(e.session_id, e.stream, e.payload) for e in events] == items
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    assert await storage.events.replay("s1", "get", 0) == [events[0]]
    assert await storage.events.replay("s2", "get", 0) == [events[1]]
    assert await storage.events.replay("s1", "post-1", 0) == [events[2]]


async def test_a_fan_out_gives_each_session_the_seq_of_its_own_event(storage: Storage) -> None:
    items = [(f"s{n}", "get", f'{{"n":{n}}}'.encode()) for n in range(300)]

    events = await storage.events.append_many(items)

    assert [(e.session_id, e.stream, e.payload) for e in events] == items
    assert len({e.seq for e in events}) == len(items)
    for event in events[::37]:
        assert await storage.events.replay(event.session_id, "get", 0) == [event]
    later = await storage.events.append_many(items[:2])
    assert min(e.seq for e in later) > max(e.seq for e in events)


async def test_append_many_of_nothing_appends_nothing(storage: Storage) -> None:
    assert await storage.events.append_many([]) == []


async def test_append_many_is_all_or_nothing(storage: Storage) -> None:
    with pytest.raises(sa.exc.IntegrityError):
        await storage.events.append_many([("s1", "get", b"{}"), ("s1", None, b"{}")])  # type: ignore[list-item]
    assert await storage.events.replay("s1", "get", 0) == []


async def test_replay_is_oldest_first_and_starts_after_the_given_seq(storage: Storage) -> None:
    events = [await storage.events.append("s1", "get", f'{{"n":{n}}}'.encode()) for n in range(5)]

    assert await storage.events.replay("s1", "get", 0) == events
    assert await storage.events.replay("s1", "get", events[1].seq) == events[2:]
    assert await storage.events.replay("s1", "get", events[-1].seq) == []


async def test_replay_returns_at_most_limit_events(storage: Storage) -> None:
    events = await storage.events.append_many([("s1", "get", b"{}")] * 5)
    assert await storage.events.replay("s1", "get", 0, limit=2) == events[:2]
    assert await storage.events.replay("s1", "get", events[1].seq, limit=2) == events[2:4]


async def test_replay_sees_only_its_own_session_and_stream(storage: Storage) -> None:
    mine = await storage.events.append("s1", "get", b"1")
    await storage.events.append("s1", "post-7", b"2")
    await storage.events.append("s2", "get", b"3")
    later = await storage.events.append("s1", "get", b"4")

    assert await storage.events.replay("s1", "get", 0) == [mine, later]
    assert [e.payload for e in await storage.events.replay("s1", "post-7", 0)] == [b"2"]
    assert [e.payload for e in await storage.events.replay("s2", "get", 0)] == [b"3"]
    assert await storage.events.replay("s3", "get", 0) == []


async def test_dropping_a_session_forgets_its_events_only(storage: Storage) -> None:
    await storage.events.append_many([("s1", "get", b"1"), ("s1", "post-1", b"2")])
    kept = await storage.events.append("s2", "get", b"3")

    await storage.events.drop_session("s1")

    assert await storage.events.replay("s1", "get", 0) == []
    assert await storage.events.replay("s1", "post-1", 0) == []
    assert await storage.events.replay("s2", "get", 0) == [kept]


async def test_a_seq_is_never_reused_after_the_newest_events_are_dropped(
    storage: Storage,
) -> None:
    first = await storage.events.append("s1", "get", b"1")
    await storage.events.drop_session("s1")
    second = await storage.events.append("s2", "get", b"2")
    assert second.seq > first.seq


async def test_trim_deletes_the_events_appended_before_the_cutoff(storage: Storage) -> None:
    now = [100.0]
    log = SqlEventLog(storage.engine, clock=lambda: now[0])
    await log.append_many([("s1", "get", b"old"), ("s2", "get", b"old")])
    now[0] = 200.0
    kept = await log.append("s1", "get", b"new")

    assert await log.trim(older_than=200.0) == 2

    assert await log.replay("s1", "get", 0) == [kept]
    assert await log.replay("s2", "get", 0) == []
    assert await log.trim(older_than=200.0) == 0


async def test_tail_is_the_streams_newest_seq_and_none_for_a_stream_without_events(
    storage: Storage,
) -> None:
    assert await storage.events.tail("s1", "g") is None
    await storage.events.open_stream("s1", "g")  # one process: the hub remembers open streams
    first = await storage.events.append("s1", "g", b"1")
    await storage.events.append("s1", "other", b"2")
    await storage.events.append("s2", "g", b"3")
    assert await storage.events.tail("s1", "g") == first.seq
    assert not await storage.events.closed("s1")
    assert storage.events.dense is False
