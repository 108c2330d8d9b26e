"""EnvService: names are listed, values are encrypted and masked unless an admin reveals."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.common.errors import InvalidArgument, NotFound, PermissionDenied
from appdeck.platform.env import MASK, parse_dotenv
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


async def test_a_secret_is_masked_unless_revealed_by_an_admin(on: OnFakes) -> None:
    apps, env = on.platform.apps, on.platform.env
    app_id = (await apps.register(on.alice, "shop")).app.id
    await env.set_vars(on.alice, app_id, {"TOKEN": "s3cr3t-value"}, secret=True)
    assert (await env.get(on.alice, app_id, "TOKEN"))["value"] == MASK
    assert (await env.get(on.alice, app_id, "TOKEN", reveal=True))["value"] == "s3cr3t-value"
    await apps.grant(on.alice, app_id, "bob", "developer")
    with pytest.raises(PermissionDenied):
        await env.get(on.bob, app_id, "TOKEN", reveal=True)
    assert [v["name"] for v in await env.list_vars(on.bob, app_id)] == ["TOKEN"]


async def test_reveal_lists_every_value_for_an_admin_and_refuses_a_developer(on: OnFakes) -> None:
    apps, env = on.platform.apps, on.platform.env
    app_id = (await apps.register(on.alice, "shop")).app.id
    await env.set_vars(on.alice, app_id, {"TOKEN": "s3cr3t-value"}, secret=True)
    await env.set_vars(on.alice, app_id, {"MODE": "prod"}, secret=False)
    shown = {v["name"]: (v["secret"], v["value"]) for v in await env.reveal(on.alice, app_id)}
    assert shown == {"TOKEN": (True, "s3cr3t-value"), "MODE": (False, "prod")}
    await apps.grant(on.alice, app_id, "bob", "developer")
    with pytest.raises(PermissionDenied):
        await env.reveal(on.bob, app_id)


async def test_a_change_before_any_deploy_marks_no_restart(on: OnFakes) -> None:
    """Nothing runs yet (a deployed app's change is marked: tests/platform/advice)."""
    apps, env = on.platform.apps, on.platform.env
    app_id = (await apps.register(on.alice, "shop")).app.id
    await env.set_vars(on.alice, app_id, {"A": "1"}, secret=False)
    assert not (await apps.get(on.alice, app_id)).app.needs_restart


async def test_names_the_platform_sets_are_refused(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    for name in ("PORT", "1BAD", "with-dash"):
        with pytest.raises(InvalidArgument):
            await on.platform.env.set_vars(on.alice, app_id, {name: "x"}, secret=False)


async def test_unset_counts_what_it_removed_and_get_of_a_missing_name_is_not_found(
    on: OnFakes,
) -> None:
    env = on.platform.env
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    await env.import_dotenv(on.alice, app_id, "A=1\nexport B='two'\n# c\n", secret=False)
    assert await env.unset(on.alice, app_id, ["A", "NOPE"]) == 1
    with pytest.raises(NotFound):
        await env.get(on.alice, app_id, "A")


def test_dotenv_text_takes_quotes_comments_and_export() -> None:
    assert parse_dotenv("export A=\"x\\ny\" # no\nB=plain # comment\nC='q'") == {
        "A": "x\ny",
        "B": "plain",
        "C": "q",
    }
    with pytest.raises(InvalidArgument):
        parse_dotenv("not a pair")


@pytest.mark.parametrize("name", ["\x00", "A\x00", "a\nb", "ü", "1A", "x" * 10_000])
async def test_unset_and_get_refuse_a_name_no_var_can_have(on: OnFakes, name: str) -> None:
    """A NUL reached PostgreSQL and came back as an internal error (a busy-machine run found it)."""
    env = on.platform.env
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    with pytest.raises(InvalidArgument, match="invalid env var name"):
        await env.unset(on.alice, app_id, ["OK", name])
    with pytest.raises((InvalidArgument, NotFound)):
        await env.get(on.alice, app_id, name)


async def test_unset_takes_a_bounded_list(on: OnFakes) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    with pytest.raises(InvalidArgument, match="at most"):
        await on.platform.env.unset(on.alice, app_id, [f"N{i}" for i in range(201)])
