"""The platform on fakes (a real database, both SQLite and PostgreSQL) for the repo tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)
