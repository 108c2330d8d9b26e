"""The resource server as a client sees it: tokens, scopes, owner-bound sessions, audit."""

import base64
import json
import time

import httpx

from appdeck.auth import scopes
from appdeck.auth.tokens import TokenIssuer
from tests.support.mcp import INIT, headers, initialize, request

from .conftest import SCOPED_TOOLS, AuthWorld

ALL = scopes.render(set(scopes.ALL))


async def test_no_token_gets_401_with_the_resource_metadata_challenge(world: AuthWorld) -> None:
    r = await world.client.post("/mcp", json=request("initialize", INIT), headers=headers())
    assert r.status_code == 401
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert (
        f'resource_metadata="{world.services.base_url}/.well-known/oauth-protected-resource"'
        in challenge
    )
    assert 'scope="' in challenge
    assert "error=" not in challenge  # no credentials were sent (RFC 6750 §3.1)


async def test_a_valid_oauth_token_initializes_and_calls(world: AuthWorld) -> None:
    token = await world.token(ALL)
    sid = await initialize(world.client, token)
    r = await world.client.post(
        "/mcp", json=request("tools/call", {"name": "probe_read"}), headers=headers(sid, token)
    )
    assert r.json()["result"]["content"][0]["text"] == "ok"


def _forged(world: AuthWorld, claims_patch: dict, header_patch: dict | None = None) -> str:
    token, _ = world.services.token_issuer.issue(tenant="acme", user="u", scope=ALL, client_id=None)  # type: ignore[union-attr]
    head, body, sig = token.split(".")

    def dec(p: str) -> dict:
        return json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))

    def enc(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    h, b = dec(head), dec(body)
    b.update(claims_patch)
    h.update(header_patch or {})
    return f"{enc(h)}.{enc(b)}.{sig}"


async def test_bad_tokens_get_401(world: AuthWorld, tmp_path) -> None:
    from appdeck.auth.keys import SigningKeys

    other_keys = SigningKeys.load_or_create(tmp_path / "other")
    base = world.services.base_url
    foreign, _ = TokenIssuer(other_keys, base, f"{base}/mcp", 60).issue(
        tenant="acme", user="u", scope=ALL, client_id=None
    )
    wrong_aud, _ = world.services.token_issuer.issue(  # type: ignore[union-attr]
        tenant="acme", user="u", scope=ALL, client_id=None, audience="https://elsewhere.example/mcp"
    )
    expired, _ = world.services.token_issuer.issue(
        tenant="acme", user="u", scope=ALL, client_id=None, ttl_seconds=-120
    )  # type: ignore[union-attr]
    unsigned = _forged(world, {}, {"alg": "none"}).rsplit(".", 1)[0] + "."
    tampered = _forged(world, {"tid": "other-tenant"})
    for name, token in {
        "signed by another key": foreign,
        "for another resource": wrong_aud,
        "expired": expired,
        "alg none": unsigned,
        "tampered": tampered,
        "garbage": "not.a.jwt",
        "unknown pat": "adk_pat_nope",
    }.items():
        r = await world.client.post(
            "/mcp", json=request("initialize", INIT), headers=headers(token=token)
        )
        assert r.status_code == 401, name
        assert 'error="invalid_token"' in r.headers["www-authenticate"], name


async def test_a_token_in_the_query_string_is_not_accepted(world: AuthWorld) -> None:
    token = await world.token(ALL)
    r = await world.client.post(
        f"/mcp?access_token={token}", json=request("initialize", INIT), headers=headers()
    )
    assert r.status_code == 401


async def test_a_read_only_token_sees_no_write_tools_and_is_refused_with_step_up(
    world: AuthWorld,
) -> None:
    token = await world.token(scopes.render(set(scopes.READ_ONLY)))
    sid = await initialize(world.client, token)
    listed = (
        await world.client.post("/mcp", json=request("tools/list"), headers=headers(sid, token))
    ).json()
    names = {t["name"] for t in listed["result"]["tools"]}
    assert "probe_read" in names
    assert "probe_write" not in names
    assert "probe_deploy" not in names
    r = await world.client.post(
        "/mcp", json=request("tools/call", {"name": "probe_deploy"}), headers=headers(sid, token)
    )
    assert r.status_code == 403
    assert r.json()["error"]["data"] == {"scope": "deploy:write"}
    challenge = r.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge
    assert 'scope="deploy:write"' in challenge


async def test_every_registered_tool_is_listed_and_callable_exactly_per_its_scope(
    world: AuthWorld,
) -> None:
    """Walks the whole registry, so every tool added later is covered too."""
    tools = world.services.registry.tools
    assert set(SCOPED_TOOLS) <= set(tools)
    for scope in sorted(scopes.ALL):
        token = await world.token(scope)
        sid = await initialize(world.client, token)
        listed = (
            await world.client.post("/mcp", json=request("tools/list"), headers=headers(sid, token))
        ).json()
        visible = {t["name"] for t in listed["result"]["tools"]}
        for name, tool in tools.items():
            allowed = tool.scope is None or tool.scope == scope
            assert (name in visible) == allowed, (name, scope)
            if not allowed:
                r = await world.client.post(
                    "/mcp",
                    json=request("tools/call", {"name": name, "arguments": {}}),
                    headers=headers(sid, token),
                )
                assert r.status_code == 403, (name, scope)
            for action, needed in tool.action_scopes.items():
                if allowed and needed != scope:
                    r = await world.client.post(
                        "/mcp",
                        json=request("tools/call", {"name": name, "arguments": {"action": action}}),
                        headers=headers(sid, token),
                    )
                    assert r.status_code == 403, (name, action, scope)
                    assert r.json()["error"]["data"] == {"scope": needed}


async def test_a_session_presented_by_another_user_is_dropped(world: AuthWorld) -> None:
    alice = await world.token(ALL, "alice")
    bob = await world.token(ALL, "bob")
    sid = await initialize(world.client, alice)
    r = await world.client.post("/mcp", json=request("tasks/list"), headers=headers(sid, bob))
    assert r.status_code == 403
    assert r.json()["error"]["code"] == -32003
    r = await world.client.post("/mcp", json=request("tools/list"), headers=headers(sid, alice))
    assert r.status_code == 404


async def test_a_pat_works_for_tools_but_not_for_resources(world: AuthWorld) -> None:
    pat = await world.pat("apps:read")
    assert pat.startswith("adk_pat_")
    sid = await initialize(world.client, pat)
    ok = await world.client.post(
        "/mcp", json=request("tools/call", {"name": "probe_read"}), headers=headers(sid, pat)
    )
    assert ok.json()["result"]["content"][0]["text"] == "ok"
    r = await world.client.post("/mcp", json=request("resources/list"), headers=headers(sid, pat))
    assert r.status_code == 403
    assert r.json()["error"]["code"] == -32003


async def test_a_revoked_access_token_is_refused(world: AuthWorld) -> None:
    token, claims = world.services.token_issuer.issue(
        tenant="acme", user="u", scope=ALL, client_id=None
    )  # type: ignore[union-attr]
    assert (
        await world.client.post(
            "/mcp", json=request("initialize", INIT), headers=headers(token=token)
        )
    ).status_code == 200
    await world.services.bearer.revoke_jti(claims.jti, claims.expires_at)  # type: ignore[union-attr]
    r = await world.client.post(
        "/mcp", json=request("initialize", INIT), headers=headers(token=token)
    )
    assert r.status_code == 401


async def test_too_many_requests_get_429_with_retry_after(world: AuthWorld) -> None:
    token = await world.token(ALL)
    sid = await initialize(world.client, token)
    statuses = []
    # until the first 429 (40 of burst, 5/s back: 60 pings were enough only if they took
    # under 4 s; a loaded machine may take longer, so the count is bounded, not the time)
    for _ in range(1000):
        r = await world.client.post("/mcp", json=request("ping"), headers=headers(sid, token))
        statuses.append(r.status_code)
        if r.status_code == 429:
            body = r.json()
            assert body["error"]["code"] == -32004
            assert body["error"]["data"]["retryAfterMs"] > 0
            assert int(r.headers["retry-after"]) >= 1
            break
    assert 429 in statuses


async def test_refusals_and_calls_are_audited_without_secrets(world: AuthWorld) -> None:
    token = await world.token(scopes.render(set(scopes.READ_ONLY)))
    pat = await world.pat("apps:read")
    await world.client.post(
        "/mcp", json=request("initialize", INIT), headers=headers(token="bogus-token")
    )
    sid = await initialize(world.client, token)
    await world.client.post(
        "/mcp",
        json=request(
            "tools/call", {"name": "probe_read", "arguments": {"app_id": 7, "action": "get"}}
        ),
        headers=headers(sid, token),
    )
    await world.client.post(
        "/mcp", json=request("tools/call", {"name": "probe_deploy"}), headers=headers(sid, token)
    )
    psid = await initialize(world.client, pat)
    await world.client.post("/mcp", json=request("resources/list"), headers=headers(psid, pat))
    rows = await world.audit_rows()
    events = [(r["event"], r["status"], r["tool"]) for r in rows]
    assert ("refused", 401, None) in events
    assert ("refused", 403, "probe_deploy") in events
    assert ("refused", 403, None) in events  # the PAT on resources/list
    call = next(r for r in rows if r["event"] == "tool_call" and r["tool"] == "probe_read")
    assert call["outcome"] == "ok"
    assert call["app_id"] == 7
    assert call["action"] == "get"
    assert call["duration_ms"] is not None
    dump = json.dumps(rows, default=str)
    assert token not in dump
    assert pat not in dump
    assert "bogus-token" not in dump
    assert time.time() - rows[-1]["ts"] < 60


async def test_spellings_of_one_token_share_one_rate_limit_bucket(world: AuthWorld) -> None:
    token = await world.token(ALL)
    sid = await initialize(world.client, token)
    spellings = [f"Bearer {token}", f"bEaReR {token}", f"bearer    {token}  ", f"BEARER {token}"]
    statuses = []
    began = time.monotonic()
    # until the first 429, bounded by count (60 pings were enough only if they took under
    # 4 s): one bucket refuses after its burst of 40 plus what refilled (5/s); four buckets,
    # one a spelling, would let about four times that through
    for i in range(1000):
        h = headers(sid) | {"authorization": spellings[i % 4]}
        statuses.append(
            (await world.client.post("/mcp", json=request("ping"), headers=h)).status_code
        )
        if statuses[-1] == 429:
            break
    refilled = 5 * (time.monotonic() - began)  # 5 a second come back meanwhile
    assert set(statuses) == {200, 429}
    assert statuses.index(429) <= 40 + refilled + 1, (statuses.index(429), refilled)


async def test_a_pat_is_limited_by_its_id_whatever_the_spelling(world: AuthWorld) -> None:
    pat = await world.pat("apps:read")
    sid = await initialize(world.client, pat)
    statuses = []
    began = time.monotonic()
    for i in range(1000):  # until the first 429: bounded by count, not by a quiet machine's time
        h = headers(sid) | {"authorization": ("Bearer " if i % 2 else "bearer  ") + pat}
        statuses.append(
            (await world.client.post("/mcp", json=request("ping"), headers=h)).status_code
        )
        if statuses[-1] == 429:
            break
    refilled = 5 * (time.monotonic() - began)  # 5 a second come back meanwhile
    # one bucket for both spellings: the burst of 40, plus what refilled, then a 429
    assert statuses[-1] == 429, len(statuses)
    assert statuses.index(429) <= 40 + refilled + 1, (statuses.index(429), refilled)


async def test_an_address_with_many_failed_authentications_waits(world: AuthWorld) -> None:
    limit = world.services.settings.auth_failures_per_ip
    for _ in range(limit):
        r = await world.client.post(
            "/mcp", json=request("initialize", INIT), headers=headers(token="nope")
        )
        assert r.status_code == 401
    r = await world.client.post(
        "/mcp", json=request("initialize", INIT), headers=headers(token="nope")
    )
    assert r.status_code == 401  # this failure starts the wait
    blocked = await world.client.post(
        "/mcp", json=request("initialize", INIT), headers=headers(token="nope")
    )
    assert blocked.status_code == 429
    assert blocked.json()["error"]["code"] == -32004
    assert int(blocked.headers["retry-after"]) >= 1
    other = httpx.ASGITransport(app=world.services.asgi(), client=("10.0.0.2", 4000))
    async with httpx.AsyncClient(transport=other, base_url=world.services.base_url) as c:
        r = await c.post("/mcp", json=request("initialize", INIT), headers=headers(token="nope"))
        assert r.status_code == 401  # another address is not affected
    rows = [r for r in await world.audit_rows() if r["event"] == "refused"]
    sources = [(r["status"], r["detail"].get("source")) for r in rows]
    assert sources.count((401, "127.0.0.1")) == 1  # the rest is counted, not written
    assert (429, "127.0.0.1") in sources
