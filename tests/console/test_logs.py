"""The logs section: a deployed app's lines, masked as ``tail_deploy_logs`` masks them, escaped
on the page; the live stream sends one SSE event per line whatever the line holds (CR, an
``event:`` of its own, control characters), resumes from ``Last-Event-ID``; absurd query values
are a 400, another tenant's app a 404."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path

import pytest

from appdeck.console.views import logs
from appdeck.console.views.logs import MAX_LINE, clean, event
from tests.console.conftest import ConsoleWorld

SECRET = "pa55-w0rd-xyzzy"
APP = """\
import os, http.server
print("SECRET=" + os.environ["SECRET"], flush=True)
print("evil\\rdata: injected\\r\\nevent: change", flush=True)
print("<script>alert(1)</script>", flush=True)
print("\\x1b[31mred\\u202eevil", flush=True)
print("last line", flush=True)


class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Ok).serve_forever()
"""


def test_a_line_loses_its_control_characters_and_is_cut() -> None:
    assert (
        clean("a\rb\nc\x00d\x1b[0m\u2028e\u202ef\tg")
        == "a\ufffdb\ufffdc\ufffdd\ufffd[0m\ufffde\ufffdf\tg"
    )
    long = clean("x" * (MAX_LINE * 3))
    assert long == "x" * MAX_LINE + " [cut]"
    assert clean("żółw 🐢") == "żółw 🐢"
    wide = clean("🐢" * MAX_LINE)  # 4 bytes each: cut at a character, within MAX_LINE bytes
    assert wide == "🐢" * (MAX_LINE // 4) + " [cut]"
    assert clean("x" * MAX_LINE) == "x" * MAX_LINE


def test_an_event_is_one_line_whatever_the_app_printed() -> None:
    wire = event(clean("a\r\nevent: change\ndata: x\r\rid: 9"), 7).decode()
    assert wire.count("\n\n") == 1
    assert wire.endswith("\n\n")
    fields = wire.removesuffix("\n\n").split("\n")
    assert fields[:2] == ["id: 7", "event: line"]
    assert len(fields) == 3
    assert fields[2].startswith("data: a")
    assert "\r" not in wire


@pytest.mark.parametrize(
    "query",
    [
        "cursor=-1",
        "cursor=9223372036854775808",
        "cursor=" + "9" * 400,
        "cursor=%00",
        "cursor=%D9%A3",  # an Arabic-Indic digit: isdigit, not ASCII
        "kind=evil",
        "number=0",
        "number=99999999999999999999",
        "grep=%00",
        "grep=" + "a" * 201,
    ],
)
async def test_absurd_query_values_are_a_400(world: ConsoleWorld, query: str) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    browser = world.browser()
    await browser.sign_in("bob")
    for path in (f"/console/apps/{app_id}/logs", f"/console/apps/{app_id}/logs/stream"):
        answer = await browser.get(f"{path}?{query}")
        assert answer.status_code == 400, (path, answer.text)


async def test_an_app_never_deployed_shows_no_log_and_strangers_get_404(
    world: ConsoleWorld,
) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    browser = world.browser()
    await browser.sign_in("bob")
    page = await browser.get(f"/console/apps/{app_id}/logs")
    assert page.status_code == 200
    assert "No deployment yet" in page.text
    assert "data-follow" not in page.text
    assert (await browser.get(f"/console/apps/{app_id}/logs?number=3")).status_code == 404
    eve = world.browser()
    await eve.sign_in("eve", tenant="globex")
    for path in (f"/console/apps/{app_id}/logs", f"/console/apps/{app_id}/logs/stream"):
        answer = await eve.get(path)
        assert answer.status_code == 404, path
        assert "shop" not in answer.text


async def test_past_the_followed_logs_cap_a_stream_is_a_503(
    world: ConsoleWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    browser = world.browser()
    await browser.sign_in("bob")
    monkeypatch.setattr(logs, "MAX_STREAMS", 0)
    answer = await browser.get(f"/console/apps/{app_id}/logs/stream?cursor=0")
    assert answer.status_code == 503


def _events(body: str) -> list[dict[str, list[str]]]:
    """The SSE events of ``body``: each field's values (comments left out)."""
    found = []
    for block in body.split("\n\n"):
        fields: dict[str, list[str]] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields.setdefault(name, []).append(value)
        if fields:
            found.append(fields)
    return found


async def test_a_deployed_apps_lines_are_masked_escaped_and_streamed_one_event_each(
    world: ConsoleWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src" / "hello"
    (source / "app.py").write_text(APP)
    alice = await world.agent("alice")
    spec = {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/", "timeout_s": 5},
    }
    app_id = (await alice.ok("register_app", name="leaky", spec=spec))["app_id"]
    await alice.ok("env_vars", app_id=app_id, action="set", name="SECRET", value=SECRET)
    await alice.ok("manage_app", app_id=app_id, action="grant", user="carol", role="viewer")
    deployed = await alice.ok("deploy_app", app_id=app_id, strategy="recreate", wait_seconds=60)
    assert deployed["state"] == "live", deployed

    carol = world.browser()
    await carol.sign_in("carol")
    path = f"/console/apps/{app_id}/logs"
    for _ in range(150):  # the lines reach the log file shortly after the deploy: 30 s at most
        page = await carol.get(path)
        if "last line" in page.text:
            break
        await asyncio.sleep(0.2)
    assert page.status_code == 200
    assert "SECRET=[masked:SECRET]" in page.text
    assert SECRET not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<script>alert" not in page.text
    for unsafe in ("\x1b", "\u202e", "\r"):
        assert unsafe not in page.text
    assert f'data-follow="/console/apps/{app_id}/logs/stream?cursor=' in page.text
    huge = await carol.get(f"{path}?cursor=9223372036854775807")
    assert huge.status_code == 200
    assert "SECRET=" not in huge.text

    monkeypatch.setattr(logs, "PAGE", 2)  # paged forward by cursor, two lines a page
    seen: list[str] = []
    link: str | None = f"{path}?cursor=0"
    for _ in range(20):
        if link is None:
            break
        paged = await carol.get(link)
        assert paged.status_code == 200
        body = paged.text.split('aria-label="Log lines"', 1)[1].split("</pre>", 1)[0]
        seen += [x for x in body.split(">", 1)[1].split("\n") if x]
        found = re.search(r'href="([^"]+)">Next lines', paged.text)
        link = html.unescape(found.group(1)) if found else None
    assert seen.index("SECRET=[masked:SECRET]") < seen.index("last line")
    assert len(seen) == len(set(seen))  # nothing twice
    monkeypatch.setattr(logs, "PAGE", 200)

    monkeypatch.setattr(logs, "LIFETIME_S", 1.0)  # the stream ends: its whole body is read
    monkeypatch.setattr(logs, "WAIT_S", 0.2)
    streamed = await carol.get(f"{path}/stream?cursor=0")
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert SECRET not in streamed.text
    assert "\r" not in streamed.text
    events = _events(streamed.text)
    lines = [e for e in events if e.get("event") == ["line"]]
    assert all(set(e) == {"id", "event", "data"} and len(e["data"]) == 1 for e in lines)
    assert not any(e.get("event") not in (None, ["line"]) for e in events)
    texts = [e["data"][0] for e in lines]
    assert "SECRET=[masked:SECRET]" in texts
    assert "evil\ufffddata: injected" in texts  # a CR inside a line
    assert "event: change" in texts  # after CR LF: a line of its own, as data
    assert "<script>alert(1)</script>" in texts  # data for a text node, never HTML

    masked_at = lines[texts.index("SECRET=[masked:SECRET]")]["id"][0]
    resumed = await carol.client.get(
        f"{path}/stream?cursor=0", headers={"Last-Event-ID": masked_at}
    )
    again = [e["data"][0] for e in _events(resumed.text) if e.get("event") == ["line"]]
    assert "SECRET=[masked:SECRET]" not in again
    assert "last line" in again
    for bad in ("abc", "-1", "1" * 30):
        refused = await carol.client.get(f"{path}/stream", headers={"Last-Event-ID": bad})
        assert refused.status_code == 400, bad
