"""The APIs tab: the catalogue's latest document with its operations (paged, the app's text
escaped and capped) and the app's API keys as the platform lets each role read them: never a
key's value or hash."""

from __future__ import annotations

import json
import time
from typing import Any

from appdeck.common.tokens import token_hash
from appdeck.storage.api_documents import ApiDocumentStore, NewVersion
from tests.console.conftest import ConsoleWorld

HOSTILE = "<script>alert(1)</script>"


def _document(operations: int) -> dict[str, Any]:
    paths: dict[str, Any] = {
        f"/items/{i:03}": {"get": {"summary": f"item {i:03}", "operationId": f"get_{i:03}"}}
        for i in range(operations)
    }
    paths["/x/{id}<img src=x>"] = {
        "post": {"summary": HOSTILE + "\u202e" + "S" * 500, "operationId": HOSTILE}
    }
    return {"openapi": "3.1.0", "info": {"title": HOSTILE, "version": "1<b>"}, "paths": paths}


async def _discovered(world: ConsoleWorld, app_id: int, document: dict[str, Any]) -> None:
    """A document as discover_apis stores it (the app serving it is not what is tested)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    new = NewVersion(
        source="live:/openapi.json",
        title=document["info"]["title"],
        api_version=document["info"]["version"],
        openapi_version=document["openapi"],
        operations=sum(len(item) for item in document["paths"].values()),
        digest="0" * 64,
        changes={},
        discovered_by="bob",
        discovered_at=time.time(),
        document=text,
    )
    stored = await ApiDocumentStore(world.services.storage.engine).add(
        app_id, new, after=0, keep=50
    )
    assert stored is not None


async def test_owner_sees_the_operations_and_keys_but_never_a_keys_value_or_hash(
    world: ConsoleWorld,
) -> None:
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    await _discovered(world, app_id, _document(60))
    made = await bob.ok(
        "manage_api_key", action="create", app_id=app_id, name="mobile-client", scopes=["read"]
    )
    secret = str(made["api_key"])
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/apis")
    assert page.status_code == 200
    text = page.text
    assert "item 000" in text
    assert "item 049" in text
    assert "item 050" not in text
    assert "mobile-client" in text
    assert "never" in text
    assert 'aria-current="page">APIs<' in text
    assert secret not in text
    assert secret[-20:] not in text
    assert token_hash(secret) not in text
    assert "Next operations" in text
    second = await browser.get(f"/console/apps/{app_id}/apis?ops=50")
    assert "item 050" in second.text
    assert "item 000" not in second.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in second.text
    assert "<script>alert" not in second.text
    assert "<img src=x>" not in second.text
    assert "\u202e" not in second.text
    assert "\\u202e" in second.text
    assert "S" * 200 not in second.text  # the summary is capped


async def test_a_viewer_sees_the_api_but_the_platform_keeps_the_keys_from_them(
    world: ConsoleWorld,
) -> None:
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    await _discovered(world, app_id, _document(3))
    made = await bob.ok("manage_api_key", action="create", app_id=app_id, name="partner")
    carol = world.browser()
    await carol.sign_in("carol")
    page = await carol.get(f"/console/apps/{app_id}/apis")
    assert page.status_code == 200
    assert "item 002" in page.text
    assert "api.keys needs admin" in page.text
    assert "partner" not in page.text
    assert str(made["api_key"]) not in page.text
    assert str(made["key"]["prefix"]) not in page.text


async def test_an_app_without_a_document_says_so_and_a_stranger_gets_404(
    world: ConsoleWorld,
) -> None:
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/apis")
    assert page.status_code == 200
    assert "No API document discovered yet" in page.text
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    refused = await eve.get(f"/console/apps/{app_id}/apis")
    assert refused.status_code == 404
    assert "shop" not in refused.text


async def test_absurd_paging_values_are_clamped(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    await _discovered(world, app_id, _document(3))
    browser = world.browser()
    await browser.sign_in("bob")
    for query in ["ops=-1", f"ops={2**63}", "keys=%00", "ops=%E2%91%A0&keys=99999999", "ops="]:
        page = await browser.get(f"/console/apps/{app_id}/apis?{query}")
        assert page.status_code == 200, query
