"""The tenant page: members and roles per app for everyone (as the platform lets each see them),
the tenant's users and OAuth clients for tenant admins only, nothing of another tenant."""

from __future__ import annotations

from tests.console.conftest import ConsoleWorld


async def test_a_tenant_admin_sees_the_users_their_roles_and_the_machine_clients(
    world: ConsoleWorld,
) -> None:
    authz = world.services.authorization_server
    assert authz is not None
    client_id, secret = await authz.create_machine_client(
        "acme", "nightly <b>job</b>", ["apps:read"]
    )
    await authz.create_machine_client("globex", "globex robot", ["apps:read"])
    alice = world.browser()
    await alice.sign_in("alice")
    page = await alice.get("/console/tenant")
    assert page.status_code == 200
    for name in ("alice", "bob", "carol"):
        assert f'<th scope="row">{name}</th>' in page.text
    assert "eve" not in page.text
    assert "nightly &lt;b&gt;job&lt;/b&gt;" in page.text
    assert client_id in page.text
    assert secret not in page.text
    assert "globex robot" not in page.text
    assert "machine" in page.text


async def test_a_member_sees_the_members_of_their_apps_but_not_the_users_or_clients(
    world: ConsoleWorld,
) -> None:
    authz = world.services.authorization_server
    assert authz is not None
    client_id, _ = await authz.create_machine_client("acme", "nightly", ["apps:read"])
    bob = await world.agent("bob")
    shop = (await bob.ok("register_app", name="shop"))["app_id"]
    await bob.ok("manage_app", app_id=shop, action="grant", user="carol", role="viewer")
    alice = await world.agent("alice")
    await alice.ok("register_app", name="secret-plans")
    carol = world.browser()
    await carol.sign_in("carol")
    page = await carol.get("/console/tenant")
    assert page.status_code == 200
    assert f'href="/console/apps/{shop}"' in page.text
    assert 'bob <span class="muted">owner</span>' in page.text
    assert 'carol <span class="muted">viewer</span>' in page.text
    assert "secret-plans" not in page.text
    assert client_id not in page.text
    assert '<h2 id="users-h">' not in page.text


async def test_another_tenants_admin_sees_nothing_of_this_tenant(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    await bob.ok("register_app", name="shop")
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    page = await eve.get("/console/tenant")
    assert page.status_code == 200
    for text in ("shop", "bob", "alice", "carol"):
        assert text not in page.text


async def test_absurd_offsets_clamp_instead_of_failing(world: ConsoleWorld) -> None:
    alice = world.browser()
    await alice.sign_in("alice")
    for offset in ("-1", str(2**63), "%00", "1e9", "99999999999", "٣"):
        page = await alice.get(f"/console/tenant?offset={offset}")
        assert page.status_code == 200, offset
