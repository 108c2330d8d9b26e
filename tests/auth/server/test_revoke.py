"""POST /revoke with a personal access token: holding it is what authenticates its revocation
(a PAT was issued to no client); this process's resource server is told at once."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from appdeck.auth.admin import IdentityAdmin
from appdeck.auth.server import AuthorizationServer
from appdeck.auth.tokens import TokenIssuer
from appdeck.settings import Settings
from appdeck.storage.identity import PersonalTokenRecord

from .conftest import ISSUER, RESOURCE, OAuthWorld
from .helpers import register


async def _pat(authz: OAuthWorld) -> tuple[str, PersonalTokenRecord]:
    return await IdentityAdmin(authz.identities).create_pat("acme", "ada", "apps:read")


async def test_a_pat_is_revoked_by_whoever_holds_it_without_client_credentials(
    authz: OAuthWorld, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="appdeck.activity")
    token, record = await _pat(authz)
    r = await authz.http.post("/revoke", data={"token": token})
    assert r.status_code == 200
    stored = await authz.identities.get_pat(record.id)
    assert stored is not None
    assert stored.revoked_at is not None
    rows = [row for row in await authz.audit_rows() if row["event"] == "token_revoked"]
    assert len(rows) == 1
    assert rows[0]["user_id"] == authz.user.id
    assert token not in str(rows[0])
    assert f"token revoked kind=pat tenant=acme user={authz.user.id} client=- id={record.id}" in [
        r.getMessage() for r in caplog.records
    ]


async def test_revoking_a_pat_twice_or_an_unknown_one_answers_200_and_records_nothing(
    authz: OAuthWorld,
) -> None:
    token, _ = await _pat(authz)
    assert (await authz.http.post("/revoke", data={"token": token})).status_code == 200
    assert (await authz.http.post("/revoke", data={"token": token})).status_code == 200
    assert (await authz.http.post("/revoke", data={"token": "adk_pat_nonsense"})).status_code == 200
    rows = [row for row in await authz.audit_rows() if row["event"] == "token_revoked"]
    assert len(rows) == 1


async def test_a_client_may_revoke_a_pat_it_holds_too(authz: OAuthWorld) -> None:
    client = await register(authz.http)
    token, record = await _pat(authz)
    r = await authz.http.post("/revoke", data={"token": token, "client_id": client["client_id"]})
    assert r.status_code == 200
    stored = await authz.identities.get_pat(record.id)
    assert stored is not None
    assert stored.revoked_at is not None


async def test_the_resource_server_of_this_process_forgets_a_revoked_pat(
    authz: OAuthWorld, tmp_path: Path
) -> None:
    forgotten: list[PersonalTokenRecord] = []

    async def revoke_jti(jti: str, expires_at: float) -> None:
        return None

    settings = Settings.model_validate({"data_dir": tmp_path})
    server = AuthorizationServer(
        ISSUER,
        RESOURCE,
        TokenIssuer(authz.keys, ISSUER, RESOURCE, 3600),
        authz.keys,
        authz.identities,
        authz.oauth,
        revoke_jti,
        authz.audit,
        settings,
        forget_pat=forgotten.append,
    )
    transport = httpx.ASGITransport(app=Starlette(routes=server.routes()))
    token, record = await _pat(authz)
    async with httpx.AsyncClient(transport=transport, base_url=ISSUER) as http:
        assert (await http.post("/revoke", data={"token": token})).status_code == 200
    assert [pat.id for pat in forgotten] == [record.id]
