"""The audit log page: a member reads their own rows, a tenant admin the tenant's, nobody
another tenant's; filters and keyset paging; hostile values escaped, absurd filters a 4xx."""

from __future__ import annotations

import asyncio
import re
import time

from appdeck.auth.audit import AuditEvent
from tests.console.conftest import ConsoleWorld


async def _settle(world: ConsoleWorld, tool: str) -> None:
    """Wait (bounded) until the audit writer (a thread, in order) has written ``tool``'s row."""
    for _ in range(250):
        if any(r["tool"] == tool for r in await world.services.audit_store.tail(20)):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the audit rows were not written")


async def _ids(world: ConsoleWorld) -> dict[str, str]:
    users = await world.services.identities.list_users("acme")
    return {u.name: u.id for u in users}


async def _rows(world: ConsoleWorld) -> None:
    ids = await _ids(world)
    log = world.services.audit
    for i in range(3):
        log.record(
            AuditEvent(
                event="tool_call",
                outcome="ok",
                tenant_id="acme",
                user_id=ids["bob"],
                tool="list_apps",
                app_id=7,
                detail={"n": i},
            )
        )
    log.record(
        AuditEvent(
            event="tool_call",
            outcome="error",
            tenant_id="acme",
            user_id=ids["carol"],
            tool="<img src=x onerror=alert(1)>",
            detail={"note": "carol's private " + "x" * 5000},
        )
    )
    log.record(AuditEvent(event="tool_call", outcome="ok", tenant_id="globex", tool="globex_only"))
    await _settle(world, "globex_only")


async def test_a_member_sees_only_their_own_rows(world: ConsoleWorld) -> None:
    await _rows(world)
    bob = world.browser()
    await bob.sign_in("bob")
    page = await bob.get("/console/audit")
    assert page.status_code == 200
    assert "list_apps" in page.text
    assert "carol&#39;s private" not in page.text
    assert "globex_only" not in page.text
    assert 'id="f-user"' not in page.text  # no user filter: it is their own rows
    forced = await bob.get("/console/audit?user=carol")
    assert "carol&#39;s private" not in forced.text


async def test_a_tenant_admin_sees_the_tenants_rows_escaped_and_cut_short(
    world: ConsoleWorld,
) -> None:
    await _rows(world)
    alice = world.browser()
    await alice.sign_in("alice")
    page = await alice.get("/console/audit")
    assert page.status_code == 200
    assert "carol&#39;s private" in page.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page.text
    assert "<img src=x" not in page.text
    assert "x" * 400 not in page.text
    assert "globex_only" not in page.text
    only_carol = await alice.get("/console/audit?user=carol")
    assert "carol&#39;s private" in only_carol.text
    assert "list_apps" not in only_carol.text
    nobody = await alice.get("/console/audit?user=eve")  # another tenant's user: no rows
    assert "No audit row matches." in nobody.text


async def test_another_tenants_admin_sees_none_of_these_rows(world: ConsoleWorld) -> None:
    await _rows(world)
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    page = await eve.get("/console/audit")
    assert "globex_only" in page.text
    assert "list_apps" not in page.text
    assert "carol" not in page.text


async def test_filters_by_app_and_tool_and_day(world: ConsoleWorld) -> None:
    await _rows(world)
    alice = world.browser()
    await alice.sign_in("alice")
    by_app = await alice.get("/console/audit?app=7")
    assert by_app.text.count("list_apps") == 3
    assert "carol&#39;s private" not in by_app.text
    by_tool = await alice.get("/console/audit?name=list_apps")
    assert by_tool.text.count("list_apps") >= 3
    assert "carol&#39;s private" not in by_tool.text
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert "list_apps" in (await alice.get(f"/console/audit?since={today}&until={today}")).text
    assert "list_apps" not in (await alice.get("/console/audit?until=2001-01-01")).text


async def test_pages_older_rows_by_id(world: ConsoleWorld) -> None:
    ids = await _ids(world)
    for i in range(120):
        world.services.audit.record(
            AuditEvent(
                event="tool_call",
                outcome="ok",
                tenant_id="acme",
                user_id=ids["bob"],
                tool=f"tool_{i:03d}",
            )
        )
    await _settle(world, "tool_119")
    bob = world.browser()
    await bob.sign_in("bob")
    first = await bob.get("/console/audit?name=")
    assert "tool_119" in first.text
    assert "tool_069" not in first.text
    older = re.search(r'href="(/console/audit\?[^"]*before=\d+)">Older rows', first.text)
    assert older is not None
    second = await bob.get(older.group(1).replace("&amp;", "&"))
    assert "tool_069" in second.text
    assert "tool_119" not in second.text
    assert "Newest rows" in second.text


async def test_absurd_filters_are_a_clean_400(world: ConsoleWorld) -> None:
    alice = world.browser()
    await alice.sign_in("alice")
    for query in (
        "app=-1",
        f"app={2**63}",
        "app=" + "9" * 40,
        "before=abc",
        f"before={2**64}",
        "since=2026-13-45",
        "until=yesterday",
        "name=%00",
        "name=" + "n" * 500,
        "user=" + "u" * 500,
    ):
        page = await alice.get(f"/console/audit?{query}")
        assert page.status_code == 400, query
    for query in ("app=9223372036854775807", "name=%F0%9F%92%A5", "before=0", "user=nobody"):
        page = await alice.get(f"/console/audit?{query}")
        assert page.status_code == 200, query
