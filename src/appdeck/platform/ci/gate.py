"""CIGate: the ``require_green`` rule, as the deploy engine's ``gate`` port.

It reads only the runs' store (the app's CI configuration and its passed runs), so it is built
before the deploy engine and CI alike and handed to the engine's constructor: the engine never
holds CI, and CI (which deploys a green commit) never has to be wired into the engine later.
"""

from __future__ import annotations

from appdeck.common.errors import FailedPrecondition
from appdeck.storage.ci import CIStore


class CIGate:
    def __init__(self, store: CIStore) -> None:
        self._store = store

    async def __call__(self, app_id: int, commit: str | None) -> None:
        """Refuse a deploy of ``commit`` when the app requires a green run and it has none."""
        config = await self._store.config(app_id)
        if config is None or not config.require_green or commit is None:
            return
        if await self._store.passed(app_id, commit):
            return
        runs = await self._store.runs(app_id, offset=0, limit=1)
        about = ""
        if runs and runs[0].commit == commit:
            about = f"; its last run #{runs[0].number} is {runs[0].state}"
        raise FailedPrecondition(
            f"commit {commit[:12]} has no passing CI run{about} (require_green)",
            hint="manage_ci trigger runs its tests; manage_ci logs shows why a run failed",
        )
