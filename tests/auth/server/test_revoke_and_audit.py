"""POST /revoke (RFC 7009) and what the audit log keeps of the whole flow."""

from __future__ import annotations

import json

import sqlalchemy as sa

from appdeck.storage.schema import audit_log

from .conftest import PASSWORD, OAuthWorld
from .helpers import get_code, pkce_pair, redeem, register, sign_in
from .test_token import basic


async def test_revoking_unknown_or_foreign_tokens_answers_200_and_changes_nothing(
    authz: OAuthWorld,
) -> None:
    mine = await register(authz.http)
    theirs = await register(authz.http)
    code, verifier = await get_code(authz.http, mine["client_id"])
    token = (await redeem(authz.http, mine["client_id"], code, verifier)).json()
    for value in ("nonsense", "a.b.c", token["refresh_token"], token["access_token"]):
        r = await authz.http.post(
            "/revoke", data={"token": value, "client_id": theirs["client_id"]}
        )
        assert r.status_code == 200
        assert r.content == b""
    assert authz.revoked == []
    refreshed = await authz.http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": token["refresh_token"],
            "client_id": mine["client_id"],
        },
    )
    assert refreshed.status_code == 200


async def test_revocation_needs_client_authentication(authz: OAuthWorld) -> None:
    client = await register(authz.http, token_endpoint_auth_method="client_secret_basic")
    r = await authz.http.post("/revoke", data={"token": "x"})
    assert r.status_code == 401
    assert r.json()["error"] == "invalid_client"
    r = await authz.http.post("/revoke", data={"token": "x", "client_id": client["client_id"]})
    assert r.status_code == 401
    r = await authz.http.post(
        "/revoke", data={"token": "x"}, headers=basic(client["client_id"], client["client_secret"])
    )
    assert r.status_code == 200


async def test_a_machine_clients_access_token_can_be_revoked(authz: OAuthWorld) -> None:
    cid, secret = await authz.server.create_machine_client("acme", "bot", ["apps:read"])
    token = (
        await authz.http.post(
            "/token", data={"grant_type": "client_credentials"}, headers=basic(cid, secret)
        )
    ).json()["access_token"]
    r = await authz.http.post("/revoke", data={"token": token}, headers=basic(cid, secret))
    assert r.status_code == 200
    assert [jti for jti, _ in authz.revoked] == [authz.verifier().verify(token)["jti"]]


async def test_the_audit_log_records_logins_tokens_and_revocations_but_no_secret(
    authz: OAuthWorld,
) -> None:
    secrets: list[str] = [PASSWORD, "wrong-password-123"]
    client = await register(authz.http, token_endpoint_auth_method="client_secret_post")
    cid = client["client_id"]
    secrets.append(client["client_secret"])
    _, challenge = pkce_pair()
    refused = await sign_in(authz.http, cid, challenge, password="wrong-password-123")
    assert refused.status_code == 200
    code, verifier = await get_code(authz.http, cid)
    secrets += [code, verifier]
    token = (
        await redeem(authz.http, cid, code, verifier, client_secret=client["client_secret"])
    ).json()
    secrets += [token["access_token"], token["refresh_token"]]
    replay = await redeem(authz.http, cid, code, verifier, client_secret=client["client_secret"])
    assert replay.status_code == 400
    r = await authz.http.post(
        "/revoke",
        data={
            "token": token["access_token"],
            "client_id": cid,
            "client_secret": client["client_secret"],
        },
    )
    assert r.status_code == 200
    bad = await authz.http.post(
        "/token",
        data={"grant_type": "client_credentials", "client_id": cid, "client_secret": "guess"},
    )
    assert bad.status_code == 401
    mc_id, mc_secret = await authz.server.create_machine_client("acme", "bot", ["apps:read"])
    secrets.append(mc_secret)
    mc = await authz.http.post(
        "/token", data={"grant_type": "client_credentials"}, headers=basic(mc_id, mc_secret)
    )
    secrets.append(mc.json()["access_token"])

    rows = await authz.audit_rows()

    events = [(r["event"], r["outcome"], (r["detail"] or {}).get("reason")) for r in rows]
    assert ("refused", "denied", "invalid_credentials") in events
    assert ("refused", "denied", "code_replay") in events
    assert ("refused", "denied", "bad_client_secret") in events
    replayed = next(r for r in rows if (r["detail"] or {}).get("reason") == "code_replay")
    assert replayed["detail"]["access_revoked"] == 1
    issued = [r for r in rows if r["event"] == "token_issued"]
    assert {r["detail"]["grant_type"] for r in issued} == {
        "authorization_code",
        "client_credentials",
    }
    first = issued[0]
    assert (first["tenant_id"], first["user_id"], first["client_id"]) == (
        "acme",
        authz.user.id,
        cid,
    )
    revoked = [r for r in rows if r["event"] == "token_revoked"]
    assert len(revoked) == 1
    assert revoked[0]["detail"]["kind"] == "access_token"
    async with authz.engine.connect() as conn:
        raw = [dict(r) for r in (await conn.execute(sa.select(audit_log))).mappings()]
    dump = json.dumps(raw, default=str)
    for secret in secrets:
        assert secret not in dump
        assert secret[:24] not in dump  # not even a prefix of one
