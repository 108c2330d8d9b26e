"""Full-text search: ranked, highlighted, filtered, paged, and in sync with every write."""

from __future__ import annotations

import pytest

from appdeck.common.errors import FailedPrecondition, InvalidArgument
from appdeck.platform.tables.catalog import Column
from appdeck.platform.tables.search import fts5_terms
from tests.platform.tables.records_kit import Kit, kit

__all__ = ["kit"]

DOCS = (Column("title", "text"), Column("body", "text"), Column("n", "integer"))


async def _docs(kit: Kit) -> list[int]:
    await kit.table("docs", DOCS, fulltext=("title", "body"))
    return await kit.records.insert(
        kit.on.alice,
        kit.app_id,
        "docs",
        [
            {"title": "Apple pie", "body": "a recipe with apple and cinnamon", "n": 1},
            {"title": "Banana bread", "body": "bread with banana", "n": 2},
            {"title": "Apple", "body": "apple apple apple, an apple orchard", "n": 3},
        ],
    )


async def test_search_ranks_matches_and_highlights_the_terms(kit: Kit) -> None:
    ids = await _docs(kit)
    page = await kit.records.search(kit.on.alice, kit.app_id, "docs", "apple")
    assert [h.row["id"] for h in page.hits] == [ids[2], ids[0]]
    assert page.hits[0].rank >= page.hits[1].rank
    assert "<mark>" in page.hits[0].snippet
    assert "apple" in page.hits[0].snippet.lower()
    assert page.next_cursor is None


async def test_search_takes_a_filter_a_projection_and_pages(kit: Kit) -> None:
    ids = await _docs(kit)
    filtered = await kit.records.search(
        kit.on.alice,
        kit.app_id,
        "docs",
        "apple",
        filter={"column": "n", "op": "lt", "value": 3},
        columns=["title"],
    )
    assert [h.row for h in filtered.hits] == [{"id": ids[0], "title": "Apple pie"}]
    first = await kit.records.search(kit.on.alice, kit.app_id, "docs", "apple", limit=1)
    assert first.next_cursor is not None
    second = await kit.records.search(
        kit.on.alice, kit.app_id, "docs", "apple", limit=1, cursor=first.next_cursor
    )
    assert [h.row["id"] for h in first.hits + second.hits] == [ids[2], ids[0]]
    assert second.next_cursor is None
    with pytest.raises(InvalidArgument) as refused:
        await kit.records.search(
            kit.on.alice, kit.app_id, "docs", "banana", limit=1, cursor=first.next_cursor
        )
    assert refused.value.details["field"] == "cursor"


async def test_the_index_follows_inserts_updates_and_deletes(kit: Kit) -> None:
    ids = await _docs(kit)
    alice, app = kit.on.alice, kit.app_id

    async def found(text: str) -> list[int]:
        return [h.row["id"] for h in (await kit.records.search(alice, app, "docs", text)).hits]

    assert await found("cinnamon") == [ids[0]]
    await kit.records.update(alice, app, "docs", {"body": "now with nutmeg"}, id=ids[0])
    assert await found("cinnamon") == []
    assert await found("nutmeg") == [ids[0]]
    await kit.records.delete(alice, app, "docs", filter={"column": "n", "op": "eq", "value": 1})
    assert await found("nutmeg") == []
    [new] = await kit.records.insert(alice, app, "docs", [{"title": "Cherry nutmeg"}])
    assert await found("nutmeg") == [new]
    await kit.records.upsert(alice, app, "docs", [{"id": new, "title": "Plum"}], on="id")
    assert await found("nutmeg") == []
    assert await found("plum") == [new]


async def test_fts_syntax_in_a_query_is_searched_as_words(kit: Kit) -> None:
    await _docs(kit)
    for text in ("title:apple", "NEAR(apple bread)", "apple*", '"apple', "apple OR", "(", "*", '"'):
        page = await kit.records.search(kit.on.alice, kit.app_id, "docs", text)
        assert isinstance(page.hits, list)
    assert fts5_terms('a"b c:d NEAR( *') == '"a""b" "c:d" "NEAR("'


async def test_a_table_without_full_text_or_an_empty_query_is_refused(kit: Kit) -> None:
    await kit.table("plain", DOCS)
    with pytest.raises(FailedPrecondition):
        await kit.records.search(kit.on.alice, kit.app_id, "plain", "x")
    await _docs(kit)
    for text in ("", "   ", "a\x00b", "x" * 1001):
        with pytest.raises(InvalidArgument) as refused:
            await kit.records.search(kit.on.alice, kit.app_id, "docs", text)
        assert refused.value.details["field"] == "query"
