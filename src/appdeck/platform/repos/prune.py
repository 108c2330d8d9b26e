"""Which checkouts (``<data>/repos/<app>/<sha>``) an app keeps: those of its last
:data:`KEEP_RECENT` deployments, of any deployment under way or live, and of the release a live
one replaced (a rollback target). The rest are removed after each new checkout."""

from __future__ import annotations

from typing import Final

from appdeck.platform.deploy import states
from appdeck.storage.deployments import DeploymentRecord, DeploymentStore

KEEP_RECENT: Final = 5


def _commit(record: DeploymentRecord) -> str | None:
    source = record.source or {}
    commit = source.get("commit") if source.get("kind") == "git" else None
    return commit if isinstance(commit, str) else None


async def kept_commits(store: DeploymentStore, app_id: int) -> set[str]:
    """The commits whose checkouts the app keeps."""
    recent = await store.for_app(app_id, limit=KEEP_RECENT)
    held = await store.for_app(app_id, states={*states.IN_PROGRESS, states.LIVE}, limit=20)
    records = {r.number: r for r in (*recent, *held)}
    for live in held:
        if live.state == states.LIVE and live.previous and live.previous not in records:
            before = await store.get(app_id, live.previous)
            if before is not None:
                records[before.number] = before
    return {c for r in records.values() if (c := _commit(r)) is not None}
