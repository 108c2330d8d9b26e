"""OutgoingRequests: server-to-client request ids unique across replicas, and which replica
waits for an answer read back from the id."""

from __future__ import annotations

import asyncio

import pytest

from appdeck.common.errors import Unavailable
from appdeck.protocol.context import OutgoingRequests


async def test_ids_are_instance_dash_counter_and_never_repeat_in_a_process() -> None:
    requests = OutgoingRequests(instance_id="9f3a")
    ids = [requests.open("s1")[0] for _ in range(100)] + [requests.open("s2")[0]]
    assert ids[:2] == ["9f3a-1", "9f3a-2"]
    assert len(set(ids)) == 101


async def test_two_replicas_never_issue_the_same_id() -> None:
    a, b = OutgoingRequests(instance_id="aa11"), OutgoingRequests(instance_id="bb22")
    assert {a.open("s")[0] for _ in range(50)}.isdisjoint(b.open("s")[0] for _ in range(50))


@pytest.mark.parametrize(
    ("request_id", "owner"),
    [
        ("9f3a-12", "9f3a"),
        ("a-b-3", "a-b"),
        ("9f3a-", None),
        ("-3", None),
        ("9f3a-x", None),
        ("9f3a", None),
        (12, None),
        (None, None),
        (["9f3a-1"], None),
        ("x" * 200 + "-1", None),
    ],
)
def test_the_owner_is_read_from_the_id_and_anything_else_is_nobody(
    request_id: object, owner: str | None
) -> None:
    assert OutgoingRequests(instance_id="me").owner_of(request_id) == owner


async def test_an_answer_resolves_only_its_own_session_and_id_once() -> None:
    requests = OutgoingRequests(instance_id="me")
    request_id, future = requests.open("s1")
    assert not requests.resolve("s2", {"id": request_id, "result": {}})
    assert not requests.resolve("s1", {"id": [request_id], "result": {}})
    assert requests.resolve("s1", {"id": request_id, "result": {"ok": True}})
    assert not requests.resolve("s1", {"id": request_id, "result": {}})
    async with asyncio.timeout(10):
        assert (await future)["result"] == {"ok": True}


async def test_without_an_instance_ids_stay_plain_numbers() -> None:
    requests = OutgoingRequests()
    assert requests.open("s")[0] == 1
    assert requests.owner_of(1) is None


async def test_a_session_that_ends_fails_its_waiting_requests() -> None:
    requests = OutgoingRequests(instance_id="me")
    _, future = requests.open("s1")
    requests.abandon_session("s1")
    with pytest.raises(Unavailable):
        await future
