"""Deployments in the database: at most one in progress per app whatever races (the partial
unique index), and writes under an app lease refused once the lease is lost."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sqlalchemy import event

from appdeck.auth.admin import IdentityAdmin
from appdeck.common.errors import Conflict
from appdeck.platform.deploy import states
from appdeck.storage import Storage
from appdeck.storage.app_locks import AppLockStore, Fenced, Lease
from appdeck.storage.apps import AppStore
from appdeck.storage.deployments import DeploymentRecord, DeploymentStore, Move, StaleState
from appdeck.storage.identity import IdentityStore


async def _app(storage: Storage) -> int:
    admin = IdentityAdmin(IdentityStore(storage.engine))
    await admin.create_tenant("acme")
    user = await admin.create_user("acme", "alice", None, role="admin")
    return (await AppStore(storage.engine).create("acme", "shop", None, {}, user.id)).id


async def _create(
    store: DeploymentStore, app_id: int, state: str = "queued", previous: int | None = None
) -> DeploymentRecord:
    return await store.create(
        app_id=app_id,
        strategy="rolling",
        spec={},
        env="sealed",
        source={"path": "/src"},
        created_by="alice",
        previous=previous,
        instance_id="r1",
        state=state,
    )


async def test_fifty_concurrent_creates_leave_exactly_one_deployment_in_progress(
    storage: Storage,
) -> None:
    app_id = await _app(storage)
    stores = [DeploymentStore(storage.engine) for _ in range(3)]  # as if on three replicas
    async with asyncio.timeout(120):
        outcomes = await asyncio.gather(
            *(_create(stores[i % 3], app_id) for i in range(50)), return_exceptions=True
        )
    made = [o for o in outcomes if isinstance(o, DeploymentRecord)]
    refused = [o for o in outcomes if isinstance(o, Conflict)]
    assert len(made) == 1
    assert len(refused) == 49
    assert all(f"deployment {made[0].number} " in r.message for r in refused)
    assert len(await stores[0].for_app(app_id)) == 1


async def test_settled_deployments_do_not_count_as_in_progress(storage: Storage) -> None:
    app_id = await _app(storage)
    store = DeploymentStore(storage.engine)
    first = await _create(store, app_id)
    await store.update(app_id, first.number, state="failed", message="boom")
    second = await _create(store, app_id)
    assert second.number == first.number + 1
    with pytest.raises(Conflict, match=f"deployment {second.number} "):
        await _create(store, app_id)


async def test_a_write_under_a_lost_lease_is_refused_and_changes_nothing(storage: Storage) -> None:
    app_id = await _app(storage)
    store, locks = DeploymentStore(storage.engine), AppLockStore(storage.engine)
    record = await _create(store, app_id)
    mine = await locks.acquire(app_id, "r1:a", 30)
    assert mine is not None
    building = await store.update(app_id, record.number, state="building", lease=mine)
    assert building.state == "building"
    assert await locks.release(mine)  # expired now: as if paused past it
    theirs = await locks.acquire(app_id, "r2:b", 30)
    assert theirs is not None
    with pytest.raises(Fenced):
        await store.update(app_id, record.number, state="starting", message="go", lease=mine)
    after = await store.get(app_id, record.number)
    assert after is not None
    assert (after.state, after.steps) == ("building", building.steps)
    failed = await store.update(app_id, record.number, state="failed", lease=theirs)
    assert failed.state == "failed"


async def test_a_lost_leases_write_that_the_new_state_forbids_is_refused_as_fenced(
    storage: Storage,
) -> None:
    # the paused replica's unwind ("cancelled") after the takeover wrote "failed": the state
    # machine forbids failed -> cancelled, but the cause is the lease (seen in a CI run as an
    # IllegalTransition traceback instead of the fence's refusal)
    app_id = await _app(storage)
    store = DeploymentStore(storage.engine, transitions=states.check)
    locks = AppLockStore(storage.engine)
    record = await _create(store, app_id)
    mine = await locks.acquire(app_id, "r1:a", 30)
    assert mine is not None
    await store.update(app_id, record.number, state="building", lease=mine)
    assert await locks.release(mine)  # expired now: as if paused past it
    theirs = await locks.acquire(app_id, "r2:b", 30)
    assert theirs is not None
    failed = await store.update(app_id, record.number, state="failed", lease=theirs)
    with pytest.raises(Fenced, match="no longer held"):
        await store.update(app_id, record.number, state="cancelled", lease=mine)
    assert await store.get(app_id, record.number) == failed  # the takeover's write stands
    with pytest.raises(states.IllegalTransition):  # a lease still held: the state's refusal
        await store.update(app_id, record.number, state="cancelled", lease=theirs)


async def test_a_lost_leases_move_that_the_new_state_forbids_is_refused_as_fenced(
    storage: Storage,
) -> None:
    _, app_id, mine = await _live_and_superseded(storage)
    store = DeploymentStore(storage.engine, transitions=states.check)
    locks = AppLockStore(storage.engine)
    assert await locks.release(mine)
    theirs = await locks.acquire(app_id, "r2:b", 30)
    assert theirs is not None
    await store.move_together(  # the takeover rolls back to #1: #2 superseded
        app_id, [Move(1, "live", "Live again", 100), Move(2, "superseded", "x", 0)], lease=theirs
    )
    with pytest.raises(Fenced, match="no longer held"):  # superseded -> rolled_back: forbidden
        await store.move_together(
            app_id, [Move(2, "rolled_back", "late", 0), Move(1, "live", "late", 100)], lease=mine
        )
    assert [r.state for r in await store.for_app(app_id)] == ["superseded", "live"]


async def test_a_lease_guards_only_its_own_apps_writes(storage: Storage) -> None:
    app_id = await _app(storage)
    store, locks = DeploymentStore(storage.engine), AppLockStore(storage.engine)
    record = await _create(store, app_id)
    other = await locks.acquire(app_id + 1000, "r1:a", 30)
    assert other is not None
    with pytest.raises(ValueError, match="guards no write"):
        await store.update(app_id, record.number, message="x", lease=other)


async def test_the_newest_deployment_of_each_app_comes_in_one_read(storage: Storage) -> None:
    app_id = await _app(storage)
    other = (await AppStore(storage.engine).create("acme", "blog", None, {}, "alice")).id
    never = (await AppStore(storage.engine).create("acme", "wiki", None, {}, "alice")).id
    store = DeploymentStore(storage.engine)
    for _ in range(3):
        await _create(store, app_id, state="failed")
    await _create(store, other, state="live")
    newest = await store.latest_for([app_id, other, never, app_id])
    assert {k: (v.number, v.state) for k, v in newest.items()} == {
        app_id: (3, "failed"),
        other: (1, "live"),
    }
    assert await store.latest_for([]) == {}


async def _live_and_superseded(storage: Storage) -> tuple[DeploymentStore, int, Lease]:
    """An app whose #1 is superseded (warm) and #2 live, and its lease."""
    app_id = await _app(storage)
    store = DeploymentStore(storage.engine)
    await _create(store, app_id, state="superseded")
    await _create(store, app_id, state="live")
    lease = await AppLockStore(storage.engine).acquire(app_id, "r1:a", 30)
    assert lease is not None
    return store, app_id, lease


async def test_a_rollback_moves_both_records_in_one_write_with_their_steps(
    storage: Storage,
) -> None:
    store, app_id, lease = await _live_and_superseded(storage)
    back, left = await store.move_together(
        app_id,
        [Move(1, "live", "Live again", 100), Move(2, "rolled_back", "Rolled back to 1", 0)],
        lease=lease,
    )
    assert (back.number, back.state, back.traffic, back.status_message) == (
        1,
        "live",
        100,
        "Live again",
    )
    assert (left.number, left.state, left.traffic) == (2, "rolled_back", 0)
    assert left.steps[-1]["message"] == "Rolled back to 1"
    assert [r.state for r in await store.for_app(app_id)] == ["rolled_back", "live"]


async def test_when_one_move_is_refused_neither_record_changes(storage: Storage) -> None:
    store, app_id, lease = await _live_and_superseded(storage)
    with pytest.raises(StaleState, match="gone"):  # #3 does not exist: refused after #1 moved
        await store.move_together(
            app_id,
            [Move(1, "live", "Live again", 100), Move(3, "rolled_back", "x", 0)],
            lease=lease,
        )
    assert [r.state for r in await store.for_app(app_id)] == ["live", "superseded"]
    locks = AppLockStore(storage.engine)
    assert await locks.release(lease)  # lost: as if paused past it
    theirs = await locks.acquire(app_id, "r2:b", 30)
    assert theirs is not None
    with pytest.raises(Fenced):
        await store.move_together(
            app_id,
            [Move(1, "live", "Live again", 100), Move(2, "rolled_back", "x", 0)],
            lease=lease,
        )
    after = await store.for_app(app_id)
    assert [(r.state, len(r.steps)) for r in after] == [("live", 1), ("superseded", 1)]


async def test_a_last_write_lets_the_lease_go_in_its_own_transaction_and_only_if_it_moved(
    storage: Storage,
) -> None:
    store, app_id, lease = await _live_and_superseded(storage)
    locks = AppLockStore(storage.engine)
    with pytest.raises(StaleState, match="gone"):  # refused: nothing written, still held
        await store.move_together(
            app_id,
            [Move(1, "live", "Live again", 100), Move(3, "rolled_back", "x", 0)],
            lease=lease,
            let_go=True,
        )
    assert await locks.held(lease)
    back, left = await store.move_together(
        app_id,
        [Move(1, "live", "Live again", 100), Move(2, "rolled_back", "Rolled back to 1", 0)],
        lease=lease,
        let_go=True,
    )
    assert (back.state, left.state) == ("live", "rolled_back")
    assert not await locks.held(lease)
    theirs = await locks.acquire(app_id, "r2:b", 30)  # free at once for the next operation
    assert theirs is not None
    assert theirs.fence == lease.fence + 1


async def test_records_known_as_read_are_moved_without_reading_them_again(
    storage: Storage,
) -> None:
    store, app_id, lease = await _live_and_superseded(storage)
    live, target = await store.live_and(app_id, 1)
    assert live is not None
    assert target is not None
    statements: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *rest: object) -> None:
        statements.append(statement.split(None, 1)[0].upper())

    event.listen(storage.engine.sync_engine, "before_cursor_execute", seen)
    try:
        back, left = await store.move_together(
            app_id,
            [Move(1, "live", "Live again", 100), Move(2, "rolled_back", "Rolled back to 1", 0)],
            lease=lease,
            known=(target, live),
        )
    finally:
        event.remove(storage.engine.sync_engine, "before_cursor_execute", seen)
    assert "SELECT" not in statements
    assert statements.count("UPDATE") == 2
    assert [(r.number, r.state, len(r.steps)) for r in (back, left)] == [
        (1, "live", 2),
        (2, "rolled_back", 2),
    ]
    assert back == await store.get(app_id, 1)


async def test_a_record_changed_since_it_was_read_is_read_again_and_keeps_its_history(
    storage: Storage,
) -> None:
    store, app_id, lease = await _live_and_superseded(storage)
    live, target = await store.live_and(app_id, 1)
    assert live is not None
    assert target is not None
    await store.update(app_id, 2, message="a note written meanwhile", lease=lease)
    back, left = await store.move_together(
        app_id,
        [Move(1, "live", "Live again", 100), Move(2, "rolled_back", "Rolled back to 1", 0)],
        lease=lease,
        known=(target, live),  # #2 as it was before the note
    )
    assert [step["message"] for step in left.steps][-2:] == [
        "a note written meanwhile",
        "Rolled back to 1",
    ]
    assert (back.state, left.state) == ("live", "rolled_back")


async def test_a_record_known_in_a_state_it_cannot_move_from_is_read_again(
    storage: Storage,
) -> None:
    def no_failed_to_rolled_back(current: str, target: str) -> None:
        if (current, target) == ("failed", "rolled_back"):
            raise RuntimeError(f"deployment {current} -> {target}")

    _, app_id, lease = await _live_and_superseded(storage)
    store = DeploymentStore(storage.engine, transitions=no_failed_to_rolled_back)
    live, target = await store.live_and(app_id, 1)
    assert live is not None
    assert target is not None
    stale = dataclasses.replace(live, state="failed")  # as if read before it went live
    _, left = await store.move_together(
        app_id,
        [Move(1, "live", "Live again", 100), Move(2, "rolled_back", "Rolled back to 1", 0)],
        lease=lease,
        known=(target, stale),
    )
    assert left.state == "rolled_back"


async def test_the_live_deployment_and_a_rollbacks_target_come_in_one_read(
    storage: Storage,
) -> None:
    app_id = await _app(storage)
    store = DeploymentStore(storage.engine)
    assert await store.live_and(app_id, None) == (None, None)
    await _create(store, app_id, state="superseded")
    await _create(store, app_id, state="live", previous=1)
    await _create(store, app_id, state="failed", previous=2)
    found = {n: await store.live_and(app_id, n) for n in (None, 3, 9, 2**40)}
    shown = {n: (a and a.number, b and b.number) for n, (a, b) in found.items()}
    assert shown == {None: (2, 1), 3: (2, 3), 9: (2, None), 2**40: (2, None)}
