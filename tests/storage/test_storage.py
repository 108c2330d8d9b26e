"""Storage: one call opens the database, migrates it and builds the stores."""

from __future__ import annotations

import pytest

from appdeck.protocol.sessions import Session
from appdeck.storage import SqlEventLog, SqlSessionStore, SqlTaskStore, Storage


async def test_opening_storage_migrates_and_builds_the_three_stores(
    empty_database_url: str,
) -> None:
    storage = await Storage.open(empty_database_url)
    try:
        assert isinstance(storage.sessions, SqlSessionStore)
        assert isinstance(storage.tasks, SqlTaskStore)
        assert isinstance(storage.events, SqlEventLog)
        assert await storage.sessions.count() == 0
    finally:
        await storage.close()


async def test_what_was_stored_is_there_after_closing_and_opening_again(
    empty_database_url: str,
) -> None:
    session = Session(id="s1", tenant="acme", user="ada", protocol_version="2025-11-25")
    first = await Storage.open(empty_database_url)
    try:
        await first.sessions.insert(session)
        event = await first.events.append("s1", "get", b"{}")
    finally:
        await first.close()

    second = await Storage.open(empty_database_url)
    try:
        assert await second.sessions.load("s1") == session
        assert await second.events.replay("s1", "get", 0) == [event]
    finally:
        await second.close()


async def test_an_unreachable_database_fails_to_open() -> None:
    with pytest.raises(ConnectionRefusedError):
        await Storage.open("postgresql+asyncpg://postgres@127.0.0.1:1/nothing")


async def test_an_unsupported_url_fails_to_open() -> None:
    with pytest.raises(ValueError, match="unsupported database"):
        await Storage.open("mysql+aiomysql://root@127.0.0.1/appdeck")
