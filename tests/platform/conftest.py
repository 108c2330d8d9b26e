from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.platform.on_fakes import close_app_databases


@pytest.fixture(autouse=True)
async def _close_app_databases() -> AsyncIterator[None]:
    """The app databases a test's platform opened are closed after it (no leaked connections)."""
    yield
    await close_app_databases()
