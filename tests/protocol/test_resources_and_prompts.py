from appdeck.common.identity import Principal
from appdeck.protocol.errors import FORBIDDEN, INVALID_PARAMS, RESOURCE_NOT_FOUND

from .conftest import ALICE, BOB, Harness


async def test_resources_list_and_templates_list(harness: Harness) -> None:
    session = await harness.init()
    listed = (await harness.request("resources/list", {}, session=session))["result"]
    assert listed["resources"] == [
        {"uri": "test://static", "name": "static", "mimeType": "text/plain"}
    ]
    templates = (await harness.request("resources/templates/list", {}, session=session))["result"]
    assert templates["resourceTemplates"] == [{"uriTemplate": "test://items/{id}", "name": "item"}]


async def test_a_template_resource_reads_with_its_variables(harness: Harness) -> None:
    session = await harness.init()
    contents = (
        await harness.request("resources/read", {"uri": "test://items/7"}, session=session)
    )["result"]
    assert contents["contents"][0]["text"] == '{"id": 7}'


async def test_an_unknown_resource_is_minus_32002_with_the_uri(harness: Harness) -> None:
    session = await harness.init()
    for uri in ("test://nothing", "test://items/0"):
        reply = await harness.request("resources/read", {"uri": uri}, session=session)
        assert reply["error"]["code"] == RESOURCE_NOT_FOUND
        assert reply["error"]["data"] == {"uri": uri}


async def test_personal_access_tokens_may_not_use_resources(harness: Harness) -> None:
    pat = Principal("acme", "alice", frozenset({"apps:read"}), kind="pat")
    session = await harness.init(pat)
    reply = await harness.request("resources/list", {}, session=session, principal=pat)
    assert reply["error"]["code"] == FORBIDDEN


async def test_updates_go_to_subscribers_only(harness: Harness) -> None:
    alice = await harness.init(ALICE)
    bob = await harness.init(BOB)
    assert (await harness.request("resources/subscribe", {"uri": "test://items/3"}, session=alice))[
        "result"
    ] == {}
    await harness.server.resources.updated("test://items/3")
    await harness.server.resources.updated("test://items/4")
    updates = [
        (sid, m["params"]["uri"])
        for sid, m in harness.outbox.sent
        if m["method"] == "notifications/resources/updated"
    ]
    assert updates == [(alice.id, "test://items/3")]
    assert bob.id not in [sid for sid, _ in updates]
    await harness.request("resources/unsubscribe", {"uri": "test://items/3"}, session=alice)
    await harness.server.resources.updated("test://items/3")
    assert (
        len([m for _, m in harness.outbox.sent if m["method"] == "notifications/resources/updated"])
        == 1
    )


async def test_subscribing_to_an_unknown_resource_is_not_found(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request("resources/subscribe", {"uri": "nope://x"}, session=session)
    assert reply["error"]["code"] == RESOURCE_NOT_FOUND


async def test_subscriptions_survive_a_reload_of_the_session(harness: Harness) -> None:
    session = await harness.init()
    await harness.request("resources/subscribe", {"uri": "test://static"}, session=session)
    assert harness.sessions_store.rows[session.id].subscriptions == {"test://static"}


async def test_prompts_get_validates_arguments(harness: Harness) -> None:
    session = await harness.init()
    listed = (await harness.request("prompts/list", {}, session=session))["result"]["prompts"]
    assert listed == [{"name": "greet", "arguments": [{"name": "who", "required": True}]}]
    ok = await harness.request(
        "prompts/get", {"name": "greet", "arguments": {"who": "Ada"}}, session=session
    )
    assert ok["result"]["messages"][0]["content"]["text"] == "hi Ada"
    for params in (
        {"name": "greet"},
        {"name": "greet", "arguments": {"who": 1}},
        {"name": "greet", "arguments": {"who": "a", "extra": "b"}},
        {"name": "nope"},
    ):
        assert (await harness.request("prompts/get", params, session=session))["error"][
            "code"
        ] == INVALID_PARAMS


async def test_list_changed_reaches_every_live_session(harness: Harness) -> None:
    a = await harness.init(ALICE)
    b = await harness.init(BOB)
    await harness.server.resources.list_changed()
    await harness.server.prompts.list_changed()
    assert harness.outbox.methods(a.id) == [
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    ]
    assert harness.outbox.methods(b.id) == harness.outbox.methods(a.id)
