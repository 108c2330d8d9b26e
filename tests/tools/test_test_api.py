"""test_api through the HTTP app, every result (errors included) checked against its
outputSchema. With the fixture app deployed behind the real ingress: a passing call, a
response that breaks its schema, an app error, a cut body, the app's key added or not, and
every SSRF attempt of issue 12 refused or (a redirect) reported without being followed, while
a trap listening on another local port sees nothing. Without a deployment: scopes, roles,
arguments."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator

from appdeck.common.identity import Principal
from tests.ingress.upstreams import Upstream
from tests.tools.conftest import Caller, World

HELLO_SPEC = {"run_command": "python3 app.py", "health_check": {"path": "/healthz"}}


async def _checked(caller: Caller, **arguments: Any) -> dict[str, Any]:
    """The tool's result, after checking it against the outputSchema tools/list gives."""
    listed = await caller.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == "test_api"]
    result = await caller.tool("test_api", **arguments)
    Draft202012Validator(tool["outputSchema"]).validate(result["structuredContent"])
    return result


async def _ok(caller: Caller, **arguments: Any) -> dict[str, Any]:
    result = await _checked(caller, **arguments)
    assert not result.get("isError"), result
    data = dict(result["structuredContent"])
    assert data["untrusted"] is True
    assert data["redirect_followed"] is False
    data["summary"] = result["content"][0]["text"].split("\n", 1)[0]
    return data


async def _error(caller: Caller, **arguments: Any) -> str:
    result = await _checked(caller, **arguments)
    assert result.get("isError") is True, result
    return str(result["structuredContent"]["error"]["code"])


async def _live_hello(world: World, alice: Caller) -> int:
    """hello deployed behind the real ingress, its document discovered."""
    full = {"source_path": str(world.source), **HELLO_SPEC}
    app_id = int((await alice.ok("register_app", name="hello", spec=full))["app_id"])
    deployed = await alice.ok("deploy_app", app_id=app_id, strategy="recreate", wait_seconds=60)
    assert deployed["state"] == "live", deployed
    user = await world.services.identities.find_user("acme", "alice")
    assert user is not None
    principal = Principal("acme", user.id, scopes=frozenset({"apis:write"}), kind="oauth")
    found = await world.services.platform.apis.catalog.discover(principal, app_id)
    assert found.document.operations == 10
    return app_id


async def test_calls_reach_the_deployed_app_and_schema_breaks_are_reported(
    deploy_world: World,
) -> None:
    alice = await deploy_world.caller("alice")
    app_id = await _live_hello(deploy_world, alice)

    item = await _ok(
        alice, app_id=app_id, method="GET", path="/items/{item_id}", path_params={"item_id": 5}
    )
    assert (item["status"], item["operation"]) == (200, "GET /items/{item_id}")
    assert json.loads(item["body"]) == {"id": 5, "name": "item 5"}
    assert item["validation"] == {"checked": True, "valid": True, "errors": []}
    assert item["request"]["target"] == "/items/5"
    assert item["request"]["key"] == "none"
    assert {"name": "Host", "value": "hello--acme.localhost"} in item["request"]["headers"]
    assert "matches its documented schema" in item["summary"]

    broken = await _ok(alice, app_id=app_id, method="GET", path="/broken")
    assert broken["status"] == 200
    assert broken["validation"]["valid"] is False
    assert broken["validation"]["errors"] == ["body/count: 'many' is not of type 'integer'"]
    assert "does NOT match its documented schema: 1 problem(s)" in broken["summary"]
    assert "many" not in broken["summary"]  # the app's text stays in the data

    failed = await _ok(alice, app_id=app_id, method="GET", path="/fail")
    assert (failed["status"], failed["validation"]["valid"]) == (500, True)  # documented 500

    echoed = await _ok(alice, app_id=app_id, method="POST", path="/echo", body={"n": [1, 2]})
    assert json.loads(echoed["body"]) == {"echo": {"n": [1, 2]}}

    big = await _ok(alice, app_id=app_id, method="GET", path="/big", query={"kb": 4096})
    assert big["status"] == 200
    assert big["truncated"] is True
    assert big["body_bytes"] == 64 * 1024
    assert "cut at 65536 bytes" in big["summary"]
    assert big["validation"]["checked"] is True
    assert "max_body_bytes" in big["validation"]["note"]

    head = await _ok(alice, app_id=app_id, method="HEAD", path="/items/7")
    assert (head["operation"], head["body"]) == ("GET /items/{item_id}", "")

    assert await _error(alice, app_id=app_id, method="GET", path="/nope") == "not_found"
    assert await _error(alice, app_id=app_id, method="DELETE", path="/echo") == "not_found"


async def test_ssrf_attempts_reach_nothing_but_the_app(deploy_world: World) -> None:
    alice = await deploy_world.caller("alice")
    app_id = await _live_hello(deploy_world, alice)
    trap = await Upstream("trap").start()  # another local port: "another host"
    try:
        refused: list[dict[str, Any]] = [
            {"path": "http://other/"},
            {"path": "//other/"},
            {"path": f"http://{trap.address}/"},
            {"path": f"//{trap.address}/"},
            {"path": "http://169.254.169.254/latest/meta-data/"},
            {"path": "//169.254.169.254/latest/meta-data/"},
            {"path": "http://127.0.0.1:22/"},
            {"path": "/healthz", "headers": {"Host": "169.254.169.254"}},
            {"path": "/healthz", "headers": {"Host": "127.0.0.1:5432"}},
            {"path": "/healthz", "headers": {"Host": trap.address}},
            {"path": "/healthz", "headers": {"X-Forwarded-Host": "169.254.169.254"}},
            {"path": "/items/{item_id}", "path_params": {"item_id": "../../admin"}},
            {"path": "/items/{item_id}", "path_params": {"item_id": "..%2f..%2fopenapi.json"}},
            {"path": "/items/..%2f..%2fopenapi.json"},
            {"path": "/items/%2e%2e/openapi.json"},
            {"path": "/healthz?x=1#y"},
        ]
        for arguments in refused:
            code = await _error(alice, app_id=app_id, method="GET", **arguments)
            assert code in ("invalid_argument", "not_found"), (arguments, code)

        for to in ("http://169.254.169.254/latest/meta-data/", f"http://{trap.address}/x"):
            moved = await _ok(
                alice, app_id=app_id, method="GET", path="/redirect", query={"to": to}
            )
            assert moved["status"] == 302
            assert moved["location"] == to
            assert "not followed" in moved["summary"]

        segment = await _ok(
            alice,
            app_id=app_id,
            method="GET",
            path="/items/{item_id}",
            path_params={"item_id": "http://169.254.169.254/"},
        )
        assert segment["status"] == 404  # one segment on the app's route: the app's own 404
        assert segment["request"]["target"] == "/items/http%3A%2F%2F169.254.169.254%2F"
        assert trap.seen == []
    finally:
        await trap.stop()


async def test_the_apps_key_is_added_unless_asked_not_to(deploy_world: World) -> None:
    alice = await deploy_world.caller("alice")
    app_id = await _live_hello(deploy_world, alice)
    await alice.ok("set_app_spec", app_id=app_id, spec={"api_auth": "required"})
    injected = await _ok(alice, app_id=app_id, method="GET", path="/headers")
    assert injected["status"] == 200
    assert injected["request"]["key"] == "injected"
    seen = json.loads(injected["body"])["headers"]
    assert "x-api-key" not in seen  # the ingress keeps the key from the app
    sent = {h["name"]: h["value"] for h in injected["request"]["headers"]}
    assert sent["X-API-Key"].endswith("…")
    assert len(sent["X-API-Key"]) == 13

    bare = await _ok(alice, app_id=app_id, method="GET", path="/headers", without_key=True)
    assert bare["status"] == 401
    assert bare["request"]["key"] == "none"
    assert bare["validation"]["valid"] is False  # the document does not list a 401

    wrong = await _ok(alice, app_id=app_id, method="GET", path="/", api_key="adk_key_wrong")
    assert (wrong["status"], wrong["request"]["key"]) == (401, "given")


async def test_a_read_token_may_get_but_needs_apis_write_to_post(world: World) -> None:
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    reader = await world.caller("alice", scope="apis:read")
    assert await _error(reader, app_id=app_id, method="GET", path="/") == "failed_precondition"
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        r = await reader.client.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "test_api",
                    "arguments": {"app_id": app_id, "method": method, "path": "/echo"},
                },
            },
            headers={
                "authorization": f"Bearer {reader.token}",
                "mcp-session-id": reader.session,
                "accept": "application/json, text/event-stream",
                "content-type": "application/json",
            },
        )
        assert r.status_code == 403, method  # step-up: only GET and HEAD with apis:read
        assert r.json()["error"]["data"] == {"scope": "apis:write"}


async def test_without_a_role_the_app_is_not_found_and_without_a_document_discover_first(
    world: World,
) -> None:
    alice = await world.caller("alice")
    bob = await world.caller("bob")
    eve = await world.caller("eve", tenant="globex")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    assert await _error(eve, app_id=app_id, method="GET", path="/") == "not_found"
    assert await _error(bob, app_id=app_id, method="GET", path="/") == "not_found"
    await alice.ok("manage_app", action="grant", app_id=app_id, user="bob", role="viewer")
    assert await _error(bob, app_id=app_id, method="GET", path="/") == "forbidden"
    result = await _checked(alice, app_id=app_id, method="GET", path="/")
    error = result["structuredContent"]["error"]
    assert error["code"] == "failed_precondition"
    assert error["hint"] == "call discover_apis first"


async def test_bad_arguments_are_refused_naming_the_field(world: World) -> None:
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    for arguments, field in (
        ({"method": "TRACE", "path": "/"}, "method"),
        ({"method": "GET", "path": ""}, "path"),
        ({"method": "GET", "path": "/" + "a" * 2048}, "path"),
        ({"method": "GET", "path": "http://169.254.169.254/"}, "path"),
        ({"method": "GET", "path": "/", "timeout_s": 0}, "timeout_s"),
        ({"method": "GET", "path": "/", "timeout_s": 31}, "timeout_s"),
        ({"method": "GET", "path": "/", "max_body_bytes": 1023}, "max_body_bytes"),
        ({"method": "GET", "path": "/", "max_body_bytes": 2**20 + 1}, "max_body_bytes"),
        ({"method": "GET", "path": "/", "headers": {"X-A": "b\r\nHost: evil"}}, "headers/X-A"),
        ({"method": "GET", "path": "/", "headers": {"Host": "169.254.169.254"}}, "headers/Host"),
        ({"method": "GET", "path": "/", "headers": {f"X-{n}": "v" for n in range(21)}}, "headers"),
        ({"method": "GET", "path": "/", "api_key": "k", "without_key": True}, "without_key"),
        ({"method": "GET", "path": "/", "body": {"a": 1}}, "body"),
        ({"method": "POST", "path": "/", "body": "x" * (256 * 1024)}, "body"),
        ({"method": "GET", "path": "/", "query": {"q": ["v"] * 51}}, "query/q"),
        ({"method": "GET", "path": "/", "path_params": {"p": "x" * 1025}}, "path_params/p"),
        ({"method": "GET", "path": "/", "bogus": 1}, "bogus"),
    ):
        result = await _checked(alice, app_id=app_id, **arguments)
        error = result["structuredContent"]["error"]
        assert error["code"] == "invalid_argument", (arguments, error)
        assert error["details"]["field"] == field, (arguments, error)


async def test_the_tool_is_listed_with_a_read_token_and_says_when_to_use_it(world: World) -> None:
    reader = await world.caller("alice", scope="apis:read")
    listed = await reader.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == "test_api"]
    assert tool["annotations"]["readOnlyHint"] is False
    assert "discover_apis" in tool["description"]
    assert set(tool["inputSchema"]["required"]) == {"app_id", "method", "path"}
    nothing = await world.caller("alice", scope="apps:read")
    listed = await nothing.rpc("tools/list")
    assert "test_api" not in [t["name"] for t in listed["result"]["tools"]]
