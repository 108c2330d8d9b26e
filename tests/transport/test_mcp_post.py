"""POST /mcp: status codes and JSON-RPC errors for good and bad input (through ASGI)."""

import httpx
import orjson

from tests.support.mcp import ACCEPT_BOTH, INIT, headers, initialize, parse_sse, request

TOKEN = "alice-token"


async def test_initialize_returns_the_session_id_in_header_and_body(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/mcp", json=request("initialize", INIT), headers=headers(token=TOKEN))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["result"]["sessionId"] == r.headers["mcp-session-id"]
    assert body["result"]["serverInfo"]["name"] == "appdeck-mcp"


async def test_a_notification_is_accepted_with_202(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, TOKEN)
    r = await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "method": "notifications/whatever"},
        headers=headers(sid, TOKEN),
    )
    assert r.status_code == 202
    assert r.content == b""


async def test_no_token_is_401_with_a_challenge(client: httpx.AsyncClient) -> None:
    r = await client.post("/mcp", json=request("initialize", INIT), headers=headers())
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")


async def test_ping_is_open_without_a_token(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, TOKEN)
    r = await client.post("/mcp", json=request("ping"), headers=headers(sid))
    assert r.status_code == 200
    assert r.json()["result"] == {}


async def test_a_missing_session_header_is_400(client: httpx.AsyncClient) -> None:
    r = await client.post("/mcp", json=request("tools/list"), headers=headers(token=TOKEN))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32000


async def test_an_unknown_session_is_404(client: httpx.AsyncClient) -> None:
    r = await client.post("/mcp", json=request("tools/list"), headers=headers("nope", TOKEN))
    assert r.status_code == 404
    assert r.json()["error"]["code"] == -32001


async def test_malformed_json_is_a_parse_error(client: httpx.AsyncClient) -> None:
    r = await client.post("/mcp", content=b"{not json", headers=headers(token=TOKEN))
    assert r.status_code == 400
    assert r.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error: Invalid JSON"},
    }


async def test_a_wrong_jsonrpc_version_is_an_invalid_request(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/mcp", json={"jsonrpc": "1.0", "id": 1, "method": "ping"}, headers=headers(token=TOKEN)
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32600


async def test_an_unknown_method_is_method_not_found(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, TOKEN)
    r = await client.post("/mcp", json=request("no/such"), headers=headers(sid, TOKEN))
    assert r.status_code == 200
    assert r.json()["error"]["code"] == -32601


async def test_params_that_are_not_an_object_are_an_invalid_request(
    client: httpx.AsyncClient,
) -> None:
    sid = await initialize(client, TOKEN)
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": ["list_apps", {}]}
    r = await client.post("/mcp", json=call, headers=headers(sid, TOKEN))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32600
    assert '"params" must be an object' in r.json()["error"]["message"]


async def test_a_huge_body_is_413(client: httpx.AsyncClient) -> None:
    big = orjson.dumps(request("ping", {"pad": "x" * 70_000}))
    r = await client.post("/mcp", content=big, headers=headers(token=TOKEN))
    assert r.status_code == 413
    assert r.json()["error"]["code"] == -32600


async def test_a_wrong_content_type_is_415(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/mcp", content=b"{}", headers={"accept": ACCEPT_BOTH, "content-type": "text/plain"}
    )
    assert r.status_code == 415


async def test_a_wrong_accept_is_406(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/mcp",
        json=request("ping"),
        headers={"accept": "text/html", "content-type": "application/json"},
    )
    assert r.status_code == 406


async def test_other_http_methods_are_405_with_allow(client: httpx.AsyncClient) -> None:
    r = await client.put("/mcp", content=b"{}")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, POST, DELETE"


async def test_a_foreign_host_or_origin_is_403(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/mcp", json=request("initialize", INIT), headers=headers(token=TOKEN, host="evil.example")
    )
    assert r.status_code == 403
    r = await client.post(
        "/mcp",
        json=request("initialize", INIT),
        headers=headers(token=TOKEN, origin="http://evil.example"),
    )
    assert r.status_code == 403
    r = await client.post(
        "/mcp",
        json=request("initialize", INIT),
        headers=headers(token=TOKEN, origin="http://localhost:3000"),
    )
    assert r.status_code == 200


async def test_an_unsupported_protocol_version_is_400_listing_every_version_served(
    client: httpx.AsyncClient,
) -> None:
    # a version no era speaks must fail fast, with what the client may fall back to
    meta = {
        "io.modelcontextprotocol/protocolVersion": "1999-01-01",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    r = await client.post(
        "/mcp",
        json=request("server/discover", {"_meta": meta}),
        headers={
            **headers(token=TOKEN, mcp_protocol_version="1999-01-01"),
            "mcp-method": "server/discover",
        },
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["data"]["requested"]) == (-32022, "1999-01-01")
    assert {"2026-07-28", "2025-11-25", "2025-03-26"} <= set(error["data"]["supported"])


async def test_batches_are_refused_on_2025_11_25(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, TOKEN)
    r = await client.post("/mcp", json=[request("ping", id=1)], headers=headers(sid, TOKEN))
    assert r.status_code == 400


async def test_batches_work_on_2025_03_26(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, TOKEN, version="2025-03-26")
    batch = [
        request("ping", id=1),
        {"jsonrpc": "2.0", "method": "notifications/x"},
        request("tools/list", id=2),
    ]
    r = await client.post(
        "/mcp", json=batch, headers=headers(sid, TOKEN, mcp_protocol_version="2025-03-26")
    )
    assert r.status_code == 200
    assert [m["id"] for m in r.json()] == [1, 2]


async def test_initialize_inside_a_batch_is_refused(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/mcp",
        json=[request("initialize", INIT), request("ping", id=2)],
        headers=headers(token=TOKEN),
    )
    assert r.status_code == 400


async def test_delete_ends_the_session(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, TOKEN)
    r = await client.delete("/mcp", headers=headers(sid, TOKEN))
    assert r.status_code == 200
    r = await client.post("/mcp", json=request("ping"), headers=headers(sid, TOKEN))
    assert r.status_code == 404


async def test_another_owners_token_drops_the_session(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, "alice-token")
    r = await client.post("/mcp", json=request("tasks/list"), headers=headers(sid, "bob-token"))
    assert r.status_code == 403
    assert r.json()["error"]["code"] == -32003
    r = await client.post("/mcp", json=request("tools/list"), headers=headers(sid, "alice-token"))
    assert r.status_code == 404


async def test_a_call_that_sends_progress_is_answered_as_sse(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, TOKEN)
    params = {"name": "chatty", "arguments": {}, "_meta": {"progressToken": 7}}
    r = await client.post(
        "/mcp", json=request("tools/call", params, id=9), headers=headers(sid, TOKEN)
    )
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    events = parse_sse(r.text)
    assert events[0].data == ""
    assert events[0].retry == 50
    messages = [e.json() for e in events[1:]]
    assert [m.get("method") for m in messages[:3]] == ["notifications/progress"] * 3
    assert messages[-1]["id"] == 9
    assert messages[-1]["result"]["content"][0]["text"] == "chatty done"
    ids = [e.id for e in events]
    assert len(ids) == len(set(ids))


async def test_a_quiet_call_is_answered_as_json(client: httpx.AsyncClient) -> None:
    sid = await initialize(client, TOKEN)
    r = await client.post(
        "/mcp",
        json=request("tools/call", {"name": "echo", "arguments": {"text": "hi"}}),
        headers=headers(sid, TOKEN),
    )
    assert r.headers["content-type"] == "application/json"
    assert r.json()["result"]["content"][0]["text"] == "hi"


async def test_ping_answers_without_token_or_session(client: httpx.AsyncClient) -> None:
    r = await client.post("/mcp", json=request("ping", id=5), headers=headers())
    assert r.status_code == 200
    assert r.json() == {"jsonrpc": "2.0", "id": 5, "result": {}}
    r = await client.post("/mcp", json=request("ping"), headers=headers("unknown-session"))
    assert r.status_code == 404
