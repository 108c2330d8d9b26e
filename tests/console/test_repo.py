"""The repository section: the connected repository (branch, last commit, webhook path) for
every member, never a secret (webhook secret, token, credentials in a URL); another tenant's
app is a 404."""

from __future__ import annotations

from pathlib import Path

from appdeck.console.views.repo import without_credentials
from tests.console.conftest import ConsoleWorld
from tests.platform.repos.gitrepo import bare_repo


async def test_the_connected_repository_shows_without_its_webhook_secret(
    world: ConsoleWorld, tmp_path: Path
) -> None:
    repo = bare_repo(tmp_path / "src", "shop.git")  # inside acme's source root
    sha = repo.commit({"app.py": "print('hi')\n"}, "first version")
    alice = await world.agent("alice")
    app_id = int((await alice.ok("register_app", name="shop"))["app_id"])
    await alice.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    done = await alice.ok("connect_repo", action="connect", app_id=app_id, url=str(repo.bare))
    secret = str(done["webhook_secret"])
    platform = world.services.platform
    assert platform is not None
    record = await platform.apps.store.get(app_id)
    assert record is not None
    await platform.repos.note_commit(record, sha, "fix <script>alert(1)</script>")
    before = await world.browser().get(f"/console/apps/{app_id}/repo")
    assert before.status_code == 303  # signed out: to the sign-in page
    for user in ("alice", "carol"):
        browser = world.browser()
        await browser.sign_in(user)
        page = await browser.get(f"/console/apps/{app_id}/repo")
        assert page.status_code == 200, user
        assert f"/hooks/git/{app_id}" in page.text
        assert "main" in page.text
        assert secret not in page.text
        assert sha[:12] in page.text
        assert "fix &lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert "<script>alert" not in page.text


async def test_a_hosted_repository_shows_its_git_remote(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    done = await bob.ok("connect_repo", action="connect", app_id=app_id, url="hosted")
    push_url = done["repo"]["push_url"]
    assert push_url
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/repo")
    assert page.status_code == 200
    assert "hosted on this server" in page.text
    assert f"<code>{push_url}</code>" in page.text
    assert str(done["webhook_secret"]) not in page.text


async def test_an_app_without_a_repository_says_how_to_connect_one(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="plain"))["app_id"]
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/repo")
    assert page.status_code == 200
    assert "No repository connected" in page.text


async def test_another_tenant_gets_404_on_the_repository_page(world: ConsoleWorld) -> None:
    alice = await world.agent("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    page = await eve.get(f"/console/apps/{app_id}/repo")
    assert page.status_code == 404
    assert "shop" not in page.text


def test_a_url_is_shown_without_credentials_query_or_fragment() -> None:
    assert (
        without_credentials("https://user:tok3n@github.com/o/r.git?access_token=x#f")
        == "https://github.com/o/r.git"
    )
    assert without_credentials("https://github.com/o/r.git") == "https://github.com/o/r.git"
    assert without_credentials("/srv/src/shop.git") == "/srv/src/shop.git"
    assert without_credentials("hosted") == "hosted"
