"""AppStore.held: what each app of a tenant holds, read in the spec write's transaction: its
spec first, then its live and in-progress deployments' frozen specs (never finished ones,
never another tenant's)."""

from __future__ import annotations

from appdeck.storage import Storage
from appdeck.storage.apps import AppStore
from appdeck.storage.deployments import DeploymentStore


async def test_held_lists_each_apps_spec_then_its_live_and_in_progress_releases(
    storage: Storage,
) -> None:
    store, deployments = AppStore(storage.engine), DeploymentStore(storage.engine)
    mine = await store.create("acme", "a", None, {"instances": 1}, "u")
    idle = await store.create("acme", "b", None, {"instances": 2}, "u")
    await store.create("globex", "c", None, {"instances": 3}, "u")
    for instances, state in ((4, "superseded"), (5, "live"), (6, "failed"), (7, "building")):
        await deployments.create(
            app_id=mine.id,
            strategy="rolling",
            spec={"instances": instances},
            env="",
            source={},
            created_by="u",
            previous=None,
            instance_id="i",
            state=state,
        )
    held = await store.held("acme")
    assert set(held) == {mine.id, idle.id}
    assert held[idle.id] == [{"instances": 2}]
    own, *releases = held[mine.id]
    assert own == {"instances": 1}
    assert sorted(r["instances"] for r in releases) == [5, 7]


async def test_an_app_comes_with_the_callers_membership_in_one_read(storage: Storage) -> None:
    store = AppStore(storage.engine)
    app = await store.create("acme", "a", None, {}, "alice")
    await store.create("acme", "b", None, {}, "bob")  # another app's members are not its
    await store.set_member(app.id, "carol", "viewer", "alice")
    found = {user: await store.get_with_role(app.id, user) for user in ("alice", "carol", "dan")}
    assert {user: pair and pair[1] for user, pair in found.items()} == {
        "alice": "owner",
        "carol": "viewer",
        "dan": None,
    }
    assert all(pair is not None and pair[0] == app for pair in found.values())
    assert await store.get_with_role(app.id + 100, "alice") is None
