"""The Tables tab: the app's tables, a table's schema and its rows, read-only and paged, as
each role sees them; hostile rows render escaped and capped; hostile names and cursors in
URLs are a 404 or a 400, never a 500."""

from __future__ import annotations

from typing import Any

from appdeck.console.shown import CELL_CHARS
from appdeck.console.views.tables import page_shape
from tests.console.conftest import ConsoleWorld
from tests.tools.conftest import Caller

COLUMNS: list[dict[str, Any]] = [
    {"name": "title", "type": "text"},
    {"name": "n", "type": "integer", "unique": True},
    {"name": "meta", "type": "json"},
    {"name": "body", "type": "text", "default": "<b>empty</b>"},
]


async def _app_with_notes(world: ConsoleWorld) -> tuple[Caller, int]:
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    await bob.ok(
        "manage_table",
        action="create",
        app_id=app_id,
        table="notes",
        columns=COLUMNS,
        indexes=[{"columns": ["title"], "name": "notes_by_title"}],
    )
    await bob.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    return bob, app_id


async def test_owner_and_viewer_see_the_tables_schema_and_rows_a_stranger_gets_404(
    world: ConsoleWorld,
) -> None:
    bob, app_id = await _app_with_notes(world)
    await bob.ok(
        "records",
        action="insert",
        app_id=app_id,
        table="notes",
        rows=[{"title": "first note", "n": 1, "meta": {"k": [1, 2]}}],
    )
    for user in ("bob", "carol"):
        browser = world.browser()
        await browser.sign_in(user)
        listing = await browser.get(f"/console/apps/{app_id}/tables")
        assert listing.status_code == 200
        assert f'href="/console/apps/{app_id}/tables/notes"' in listing.text
        assert 'aria-current="page">Tables<' in listing.text
        shown = await browser.get(f"/console/apps/{app_id}/tables/notes")
        assert shown.status_code == 200
        text = shown.text
        assert "notes_by_title" in text  # the index
        assert "primary" in text  # id's key
        assert "&lt;b&gt;empty&lt;/b&gt;" in text  # a default is the app's data: escaped
        assert "first note" in text
        assert "{&#34;k&#34;:[1,2]}" in text  # JSON, compact and escaped
        assert "/actions/" not in text  # read-only
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    for path in ("tables", "tables/notes", "tables/notes?after=x"):
        refused = await eve.get(f"/console/apps/{app_id}/{path}")
        assert refused.status_code == 404, path
        assert "notes" not in refused.text


async def test_a_hostile_row_renders_escaped_and_capped(world: ConsoleWorld) -> None:
    bob, app_id = await _app_with_notes(world)
    huge = "A" * 1_000_000
    rows = [
        {"title": "<script>alert(1)</script>", "n": 1, "body": "\u202eevil\u0007"},
        {"body": huge, "n": 2, "meta": {"x": "</td><script>x</script>"}},  # title is indexed
        {"title": "日本語 ☃ 🦄 e\u0301", "n": 3},
    ]
    await bob.ok("records", action="insert", app_id=app_id, table="notes", rows=rows)
    browser = world.browser()
    await browser.sign_in("carol")
    page = await browser.get(f"/console/apps/{app_id}/tables/notes")
    assert page.status_code == 200
    text = page.text
    assert "<script>alert" not in text
    assert "<script>x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "\u202e" not in text
    assert "\\u202eevil\\x07" in text
    assert "A" * 200 + "…" in text
    assert "A" * 201 not in text
    assert "1,000,000 characters" in text
    assert "日本語 ☃ 🦄 e\u0301" in text
    assert len(text) < 100_000


async def _as_app(world: ConsoleWorld, app_id: int, *statements: str) -> None:
    """The app writes its own database behind the platform's back (it has DATABASE_URL)."""
    databases = world.services.databases
    assert databases is not None
    async with databases.transaction(app_id) as conn:
        for statement in statements:
            await conn.exec_driver_sql(statement)


async def test_what_the_app_wrote_itself_nul_blobs_and_tables_without_id_render_safely(
    world: ConsoleWorld,
) -> None:
    bob, app_id = await _app_with_notes(world)
    refused = await bob.tool(
        "records", action="insert", app_id=app_id, table="notes", rows=[{"title": "a\x00b"}]
    )
    assert refused.get("isError") is True  # the platform refuses NUL in text
    await _as_app(
        world,
        app_id,
        "INSERT INTO notes (title, n) VALUES ('a' || char(0) || 'b<i>', 7)",
        "CREATE TABLE weird (id INTEGER PRIMARY KEY AUTOINCREMENT, w BLOB)",
        "INSERT INTO weird (w) VALUES (x'3c7363726970743e00ff')",
        "CREATE TABLE noid (x TEXT)",
    )
    browser = world.browser()
    await browser.sign_in("bob")
    notes = await browser.get(f"/console/apps/{app_id}/tables/notes")
    assert notes.status_code == 200
    assert "\x00" not in notes.text
    assert "a\\x00b&lt;i&gt;" in notes.text
    for table in ("weird", "noid"):
        page = await browser.get(f"/console/apps/{app_id}/tables/{table}")
        assert page.status_code == 200, table
        assert "\x00" not in page.text
        assert "<script>" not in page.text
    assert (
        "no integer primary key id"
        in (await browser.get(f"/console/apps/{app_id}/tables/noid")).text
    )


async def test_rows_page_by_the_services_cursor(world: ConsoleWorld) -> None:
    bob, app_id = await _app_with_notes(world)
    rows = [{"title": f"row {i:03}", "n": i} for i in range(60)]
    await bob.ok("records", action="insert", app_id=app_id, table="notes", rows=rows)
    browser = world.browser()
    await browser.sign_in("bob")
    first = await browser.get(f"/console/apps/{app_id}/tables/notes")
    assert "row 024" in first.text
    assert "row 025" not in first.text
    marker = f'href="/console/apps/{app_id}/tables/notes?after='
    start = first.text.index(marker) + len('href="')
    link = first.text[start : first.text.index('"', start)].replace("&amp;", "&")
    second = await browser.get(link)
    assert second.status_code == 200
    assert "row 025" in second.text
    assert "row 024" not in second.text
    assert "First rows" in second.text


async def test_hostile_table_names_and_absurd_paging_never_fail_with_500(
    world: ConsoleWorld,
) -> None:
    _, app_id = await _app_with_notes(world)
    browser = world.browser()
    await browser.sign_in("bob")
    base = f"/console/apps/{app_id}/tables"
    for name in [
        "missing",
        "Notes",
        "notes%00",
        "%3Cscript%3E",
        "sqlite_master",
        "_appdeck_x",
        "a__b",
        "notes;drop%20table%20notes",
        "x" * 300,
        "%E2%80%AE",
        "..%2F..%2Fetc",
    ]:
        page = await browser.get(f"{base}/{name}")
        assert page.status_code == 404, name
    for query in [
        "offset=-1",
        "offset=99999999999999999999",
        f"offset={2**63}",
        "offset=%00",
        "offset=%E2%91%A0",
    ]:
        page = await browser.get(f"{base}?{query}")
        assert page.status_code == 200, query
    for query in ["after=x", "after=%00", "after=" + "a" * 5000, "after=%E2%91%A0", "after=-1"]:
        page = await browser.get(f"{base}/notes?{query}")
        assert page.status_code == 400, query
    assert (await browser.get(f"{base}/notes")).status_code == 200  # still there


def test_a_wide_table_shows_fewer_rows_and_shorter_cells() -> None:
    assert page_shape(5) == (25, CELL_CHARS)
    rows, chars = page_shape(100)
    assert (rows, chars) == (10, 60)
    assert page_shape(10_000) == (5, 40)
    for columns in range(1, 200):
        rows, chars = page_shape(columns)
        assert 5 <= rows <= 25
        assert rows * columns <= 1000 or rows == 5  # at most 1,000 cells, 5 rows at least
        assert 40 <= chars <= CELL_CHARS


async def test_a_wide_tables_page_stays_small(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    columns = [{"name": f"c{i}", "type": "text"} for i in range(99)]
    await bob.ok("manage_table", action="create", app_id=app_id, table="wide", columns=columns)
    row = {f"c{i}": "<y>" * 100 for i in range(99)}
    await bob.ok("records", action="insert", app_id=app_id, table="wide", rows=[row] * 25)
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/tables/wide")
    assert page.status_code == 200
    assert len(page.content) < 600_000
    assert "Next 10 rows" in page.text


async def test_every_column_type_renders(world: ConsoleWorld) -> None:
    bob = await world.agent("bob")
    app_id = int((await bob.ok("register_app", name="shop"))["app_id"])
    types = ["text", "integer", "real", "boolean", "timestamp", "json", "uuid"]
    columns = [{"name": f"c_{t}", "type": t} for t in types]
    await bob.ok("manage_table", action="create", app_id=app_id, table="all", columns=columns)
    row = {
        "c_text": "t",
        "c_integer": 2**62,
        "c_real": 1.5,
        "c_boolean": False,
        "c_timestamp": "2026-11-27T12:00:00Z",
        "c_json": [1, "<two>", None],
        "c_uuid": "12345678-1234-5678-1234-567812345678",
    }
    await bob.ok("records", action="insert", app_id=app_id, table="all", rows=[row])
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/tables/all")
    assert page.status_code == 200
    for shown in [str(2**62), "1.5", "false", "2026-11-27", "[1,&#34;&lt;two&gt;&#34;,null]"]:
        assert shown in page.text, shown
    assert "12345678-1234-5678-1234-567812345678" in page.text
