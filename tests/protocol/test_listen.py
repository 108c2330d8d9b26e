"""subscriptions/listen in the protocol core: the ack, the filters, who hears what, limits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from appdeck.common.identity import Principal
from appdeck.events.signals import LocalBroadcast
from appdeck.protocol.call import Call
from appdeck.protocol.envelope import Peer
from appdeck.protocol.errors import (
    INVALID_PARAMS,
    MISSING_CLIENT_CAPABILITY,
    RATE_LIMITED,
    SERVER_ERROR,
)
from appdeck.protocol.listen import (
    ACKNOWLEDGED,
    CHANNEL,
    MAX_STREAMS_PER_USER,
    MAX_URIS,
    SUBSCRIPTION_ID,
    Change,
    Filter,
    ListenHub,
)
from appdeck.protocol.stateless import capabilities
from tests.support.wait import until

from .conftest import ALICE, BOB, Harness
from .doubles import RecordingChannel

V = "2026-07-28"
EVE = Principal(tenant="other", user="eve", scopes=frozenset({"apps:read"}), kind="oauth")
PAT = Principal(tenant="acme", user="carol", scopes=frozenset({"apps:read"}), kind="pat")
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


class Stream:
    """One listen request running in the core, its frames recorded."""

    def __init__(self, harness: Harness, principal: Principal, rid: object) -> None:
        self.harness = harness
        self.principal = principal
        self.rid = rid
        self.channel = RecordingChannel()
        self.task: asyncio.Task[tuple[Any, int, Any]] | None = None

    def start(self, notifications: dict[str, Any], caps: dict[str, Any] | None = None) -> None:
        message = {
            "jsonrpc": "2.0",
            "id": self.rid,
            "method": "subscriptions/listen",
            "params": {"notifications": notifications},
        }
        call = Call(self.principal, None, self.channel, Peer(V, caps or {}))
        self.task = asyncio.create_task(self.harness.server.handle_request(message, call))

    async def acked(self) -> dict[str, Any]:
        await until(lambda: self.channel.messages or (self.task and self.task.done()), within=10)
        assert self.channel.messages, await self.answer()
        return self.channel.messages[0]

    async def answer(self) -> tuple[Any, int, Any]:
        assert self.task is not None
        async with asyncio.timeout(10):
            return await self.task

    def methods(self) -> list[str]:
        return [m["method"] for m in self.channel.messages]


@pytest.fixture
async def streams(harness: Harness) -> AsyncIterator[list[Stream]]:
    opened: list[Stream] = []
    yield opened
    for stream in opened:
        if stream.task is not None:
            stream.task.cancel()
            await asyncio.gather(stream.task, return_exceptions=True)


async def listen(
    harness: Harness,
    streams: list[Stream],
    notifications: dict[str, Any],
    principal: Principal = ALICE,
    rid: object = 7,
    caps: dict[str, Any] | None = None,
) -> Stream:
    stream = Stream(harness, principal, rid)
    streams.append(stream)
    stream.start(notifications, caps)
    await stream.acked()
    return stream


async def test_the_first_frame_is_the_ack_tagged_with_the_request_id_and_the_honoured_filter(
    harness: Harness, streams: list[Stream]
) -> None:
    stream = await listen(
        harness,
        streams,
        {
            "toolsListChanged": True,
            "promptsListChanged": False,
            "resourceSubscriptions": ["test://static", "test://items/3"],
            "somethingNew": True,
        },
        rid="sub-1",
    )
    ack = stream.channel.messages[0]
    assert ack["method"] == ACKNOWLEDGED
    assert ack["params"]["_meta"] == {SUBSCRIPTION_ID: "sub-1"}
    assert ack["params"]["notifications"] == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["test://static", "test://items/3"],
    }


async def test_notifications_carry_the_subscription_id_and_respect_the_filter(
    harness: Harness, streams: list[Stream]
) -> None:
    tools = await listen(harness, streams, {"toolsListChanged": True}, rid=1)
    prompts = await listen(harness, streams, {"promptsListChanged": True}, rid=2)
    await harness.server.listen.tools_changed()
    await harness.server.prompts.list_changed()
    await until(lambda: len(tools.channel.messages) == 2 and len(prompts.channel.messages) == 2)
    assert tools.methods() == [ACKNOWLEDGED, "notifications/tools/list_changed"]
    assert prompts.methods() == [ACKNOWLEDGED, "notifications/prompts/list_changed"]
    assert tools.channel.messages[1]["params"]["_meta"] == {SUBSCRIPTION_ID: 1}
    assert prompts.channel.messages[1]["params"]["_meta"] == {SUBSCRIPTION_ID: 2}


async def test_a_resource_update_reaches_its_followers_of_the_same_tenant_only(
    harness: Harness, streams: list[Stream]
) -> None:
    uri = "test://items/3"
    mine = await listen(harness, streams, {"resourceSubscriptions": [uri]}, rid=1)
    other_tenant = await listen(
        harness, streams, {"resourceSubscriptions": [uri]}, principal=EVE, rid=2
    )
    other_uri = await listen(harness, streams, {"resourceSubscriptions": ["test://items/4"]}, rid=3)
    await harness.server.resources.updated(uri, tenant="acme")
    await harness.server.resources.list_changed(tenant="acme")
    await until(lambda: len(mine.channel.messages) == 2)
    note = mine.channel.messages[1]
    assert note["method"] == "notifications/resources/updated"
    assert note["params"] == {"uri": uri, "_meta": {SUBSCRIPTION_ID: 1}}
    # a later change every stream hears shows the earlier ones were not delivered to them
    await harness.server.listen.notify(Change("resource", uri, None))
    await harness.server.listen.notify(Change("resource", "test://items/4", None))
    await until(lambda: len(other_tenant.channel.messages) == 2)
    await until(lambda: len(other_uri.channel.messages) == 2)
    assert other_tenant.channel.messages[1]["params"]["uri"] == uri
    assert other_uri.channel.messages[1]["params"]["uri"] == "test://items/4"
    await until(lambda: len(mine.channel.messages) == 3)
    assert mine.methods()[1:] == ["notifications/resources/updated"] * 2  # no list change


async def test_an_unreadable_or_unknown_uri_is_left_out_of_the_ack(
    harness: Harness, streams: list[Stream]
) -> None:
    stream = await listen(
        harness,
        streams,
        {"resourceSubscriptions": ["test://items/0", "test://nowhere", "test://items/5"]},
    )
    assert stream.channel.messages[0]["params"]["notifications"] == {
        "resourceSubscriptions": ["test://items/5"]
    }


async def test_a_pat_follows_no_resource(harness: Harness, streams: list[Stream]) -> None:
    stream = await listen(
        harness,
        streams,
        {
            "toolsListChanged": True,
            "resourcesListChanged": True,
            "resourceSubscriptions": ["test://static"],
        },
        principal=PAT,
    )
    assert stream.channel.messages[0]["params"]["notifications"] == {
        "toolsListChanged": True,
        "resourceSubscriptions": [],
    }


async def test_a_user_who_loses_read_access_stops_following_below_the_uri(
    harness: Harness, streams: list[Stream]
) -> None:
    stream = await listen(
        harness, streams, {"resourceSubscriptions": ["test://items/3", "test://static"]}
    )
    await harness.server.resources.unsubscribe_user("acme", "alice", "test://items")
    await harness.server.resources.updated("test://items/3", tenant="acme")
    await harness.server.resources.updated("test://static", tenant="acme")
    await until(lambda: len(stream.channel.messages) == 2)
    assert stream.channel.messages[1]["params"]["uri"] == "test://static"


async def test_task_notifications_reach_only_their_owner_s_streams_of_that_task(
    harness: Harness, streams: list[Stream]
) -> None:
    mine = await listen(harness, streams, {"taskIds": ["t1"]}, rid=1, caps=TASKS)
    bobs = await listen(harness, streams, {"taskIds": ["t1"]}, principal=BOB, rid=2, caps=TASKS)
    assert mine.channel.messages[0]["params"]["notifications"] == {"taskIds": ["t1"]}
    note = {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {"taskId": "t1"}}
    await harness.server.listen.to_task("t1", "acme", "alice", note)
    await harness.server.listen.to_task("t2", "acme", "bob", note)
    await harness.server.listen.to_task("t1", "acme", "bob", note)
    await until(lambda: len(mine.channel.messages) == 2 and len(bobs.channel.messages) == 2)
    assert mine.channel.messages[1]["params"] == {"taskId": "t1", "_meta": {SUBSCRIPTION_ID: 1}}
    assert "_meta" not in note["params"]  # the caller's message is not changed


async def test_task_ids_without_the_tasks_extension_are_a_missing_capability(
    harness: Harness, streams: list[Stream]
) -> None:
    stream = Stream(harness, ALICE, 1)
    streams.append(stream)
    stream.start({"taskIds": ["t1"]})
    reply, status, _ = await stream.answer()
    assert reply["error"]["code"] == MISSING_CLIENT_CAPABILITY
    assert reply["error"]["data"] == {"requiredCapabilities": TASKS}
    assert status == 400
    assert stream.channel.messages == []


@pytest.mark.parametrize(
    "notifications",
    [
        None,
        [],
        {"toolsListChanged": "yes"},
        {"resourceSubscriptions": "test://static"},
        {"resourceSubscriptions": [f"test://items/{n}" for n in range(MAX_URIS + 1)]},
        {"resourceSubscriptions": ["test://items/" + "x" * 2048]},
        {"resourceSubscriptions": [""]},
        {"resourceSubscriptions": [3]},
    ],
)
async def test_a_junk_filter_is_invalid_params(
    harness: Harness, streams: list[Stream], notifications: Any
) -> None:
    stream = Stream(harness, ALICE, 1)
    streams.append(stream)
    stream.start(notifications)
    reply, status, _ = await stream.answer()
    assert reply["error"]["code"] == INVALID_PARAMS
    assert status == 200  # a JSON-RPC error; the envelope's own checks carry HTTP 400
    assert stream.channel.messages == []


async def test_one_user_holds_a_bounded_number_of_streams(
    harness: Harness, streams: list[Stream]
) -> None:
    for n in range(MAX_STREAMS_PER_USER):
        await listen(harness, streams, {"toolsListChanged": True}, rid=n)
    refused = Stream(harness, ALICE, "one-more")
    streams.append(refused)
    refused.start({"toolsListChanged": True})
    reply, status, _ = await refused.answer()
    assert reply["error"]["code"] == RATE_LIMITED
    assert reply["error"]["data"] == {"maxStreams": MAX_STREAMS_PER_USER}
    assert status == 429
    await listen(harness, streams, {"toolsListChanged": True}, principal=BOB, rid="bob")
    # a closed stream frees its place
    first = streams[0]
    assert first.task is not None
    first.task.cancel()
    await asyncio.gather(first.task, return_exceptions=True)
    await listen(harness, streams, {"toolsListChanged": True}, rid="again")


async def test_the_server_ends_a_stream_with_the_complete_response(
    harness: Harness, streams: list[Stream]
) -> None:
    stream = await listen(harness, streams, {"toolsListChanged": True}, rid=9)
    harness.server.listen.end_all()
    reply, status, _ = await stream.answer()
    assert status == 200
    assert reply["id"] == 9
    assert reply["result"]["resultType"] == "complete"
    assert reply["result"]["_meta"][SUBSCRIPTION_ID] == 9
    assert harness.server.listen.open_streams == 0
    late = Stream(harness, ALICE, 10)
    streams.append(late)
    late.start({"toolsListChanged": True})
    refused, status, _ = await late.answer()
    assert refused["error"]["code"] == SERVER_ERROR


async def test_listen_is_not_a_handshake_era_method(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request(
        "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, session=session
    )
    assert reply["error"]["code"] == -32601


def test_discover_declares_what_listen_delivers() -> None:
    caps = capabilities()
    assert caps["tools"] == {"listChanged": True}
    assert caps["prompts"] == {"listChanged": True}
    assert caps["resources"] == {"subscribe": True, "listChanged": True}


async def test_changes_cross_replicas_on_the_broadcast_and_junk_is_dropped() -> None:
    broadcast = LocalBroadcast()
    a, c = ListenHub(broadcast, "a"), ListenHub(broadcast, "c")
    await a.start()
    await c.start()
    on_c = c.open(ALICE, 1, Filter(tools=True, uris=("test://x",)))
    on_a = a.open(ALICE, 2, Filter(tools=True))
    await a.tools_changed()
    await a.resource_updated("test://x", tenant="other")
    await broadcast.publish(CHANNEL, b"not json")
    await broadcast.publish(CHANNEL, json.dumps({"kind": "task", "key": "t"}).encode())
    await a.resource_updated("test://x", tenant="acme")
    async with asyncio.timeout(5):
        first, second = await on_c.next(), await on_c.next()
        mine = await on_a.next()
    assert first is not None
    assert first["method"] == "notifications/tools/list_changed"
    assert second is not None
    assert second["params"]["uri"] == "test://x"
    assert mine is not None
    assert mine["params"]["_meta"] == {SUBSCRIPTION_ID: 2}
    a.end_all()
    assert await on_a.next() is None  # once: a did not hear its own publish again
    await a.close()
    await c.close()
