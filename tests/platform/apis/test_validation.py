"""A response checked against its operation's documented responses (openapi-core): what is
reported, and how a hostile document or body is kept from hurting the server (a child process
with a deadline, no network, local $refs only)."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from appdeck.platform.apis.validation import Exchange, ResponseChecker, verdict
from tests.ingress.upstreams import Upstream

HELLO = Path(__file__).resolve().parents[2] / "fixtures" / "apps" / "hello" / "app.py"
JSON = [("content-type", "application/json")]


def _hello_document() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("hello_app_for_validation", HELLO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return copy.deepcopy(module.OPENAPI)


DOC = _hello_document()


def _with_schema(schema: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(DOC)
    doc["paths"]["/broken"]["get"]["responses"]["200"]["content"]["application/json"] = {
        "schema": schema
    }
    return doc


def test_a_response_that_matches_its_schema_is_valid() -> None:
    got = verdict(Exchange(DOC, "/items/{item_id}", "GET", 200, JSON, b'{"id": 5, "name": "a"}'))
    assert (got.checked, got.valid, got.errors) == (True, True, ())


def test_a_response_that_breaks_its_schema_says_where() -> None:
    got = verdict(Exchange(DOC, "/broken", "GET", 200, JSON, b'{"count": "many"}'))
    assert got.checked
    assert got.valid is False
    assert got.errors == ("body/count: 'many' is not of type 'integer'",)


@pytest.mark.parametrize(
    ("status", "headers", "body", "error"),
    [
        (
            201,
            JSON,
            b"{}",
            "status 201 is not documented for this operation (documented: 200, 404)",
        ),
        (
            200,
            [("content-type", "text/html")],
            b"<p>",
            "content type 'text/html' is not documented",
        ),
        (200, JSON, b"<p>not json", "the body is not valid application/json"),
        (200, JSON, b"", "the body is empty, but the documented response has content"),
    ],
)
def test_an_undocumented_status_type_or_a_non_json_body_is_an_error(
    status: int, headers: list[tuple[str, str]], body: bytes, error: str
) -> None:
    got = verdict(Exchange(DOC, "/items/{item_id}", "GET", status, headers, body))
    assert got.valid is False
    assert got.errors[0].startswith(error)


def test_without_a_body_only_the_status_is_compared() -> None:
    got = verdict(Exchange(DOC, "/items/{item_id}", "GET", 404, [], b"", check_body=False))
    assert (got.checked, got.valid) == (True, True)
    assert got.note is not None
    bad = verdict(Exchange(DOC, "/items/{item_id}", "GET", 500, [], b"", check_body=False))
    assert bad.valid is False


def test_errors_are_capped_in_number_and_length() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    body = ("[" + ",".join(['"' + "x" * 900 + '"'] * 50) + "]").encode()
    got = verdict(Exchange(_with_schema(schema), "/broken", "GET", 200, JSON, body))
    assert got.valid is False
    assert len(got.errors) == 20
    assert all(len(e) <= 500 for e in got.errors)


def test_servers_in_the_document_do_not_change_which_operation_is_checked() -> None:
    doc = copy.deepcopy(DOC)
    doc["servers"] = [{"url": "https://api.example.com/v1"}]
    doc["paths"]["/broken"]["servers"] = [{"url": "/elsewhere"}]
    got = verdict(Exchange(doc, "/broken", "GET", 200, JSON, b'{"count": "many"}'))
    assert got.valid is False


def test_a_remote_ref_is_never_followed() -> None:
    doc = _with_schema({"$ref": "http://169.254.169.254/latest/meta-data/schema.json"})
    got = verdict(Exchange(doc, "/broken", "GET", 200, JSON, b'{"count": 1}'))
    assert got.checked is False
    assert got.note == "the document has a $ref to another document: not followed"


def test_a_broken_local_ref_is_reported_not_raised() -> None:
    got = verdict(
        Exchange(
            _with_schema({"$ref": "#/components/schemas/Nope"}), "/broken", "GET", 200, JSON, b"{}"
        )
    )
    assert got.checked is False
    assert got.note is not None


async def test_the_child_reports_the_same_verdict() -> None:
    got = await ResponseChecker().check(
        Exchange(DOC, "/broken", "GET", 200, JSON, b'{"count": "many"}')
    )
    assert (got.checked, got.valid) == (True, False)
    assert got.errors == ("body/count: 'many' is not of type 'integer'",)


async def test_a_catastrophic_pattern_is_stopped_at_the_deadline() -> None:
    doc = _with_schema(
        {"type": "object", "properties": {"count": {"type": "string", "pattern": "^(a+)+$"}}}
    )
    body = b'{"count": "' + b"a" * 64 + b'!"}'
    checker = ResponseChecker(deadline_s=1.5)
    started = time.monotonic()
    got = await checker.check(Exchange(doc, "/broken", "GET", 200, JSON, body))
    assert time.monotonic() - started < 10
    assert got.checked is False
    assert got.note == "checking took longer than 1.5 s and was stopped"
    # the server's own loop was never held: a second check still answers (with the default
    # deadline: a child's start alone may take over 1.5 s on a loaded machine)
    ok = await ResponseChecker().check(Exchange(DOC, "/healthz", "GET", 200, JSON, b'{"ok": true}'))
    assert ok.valid is True


async def test_a_remote_ref_reaches_nothing_even_in_the_child() -> None:
    trap = await Upstream("trap").start()
    try:
        doc = _with_schema({"$ref": f"http://{trap.address}/schema.json"})
        got = await ResponseChecker().check(Exchange(doc, "/broken", "GET", 200, JSON, b"{}"))
        assert got.checked is False
        assert trap.seen == []
    finally:
        await trap.stop()


def test_the_child_may_open_no_socket_and_start_no_process() -> None:
    for attempt in (
        "import socket; socket.create_connection(('127.0.0.1', 9))",
        "import subprocess; subprocess.run(['true'])",
        "import os; os.system('true')",
    ):
        done = subprocess.run(
            [
                sys.executable,
                "-I",
                "-c",
                f"from appdeck.platform.apis.validation import _confine; _confine(); {attempt}",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
        assert done.returncode != 0, attempt
        assert b"PermissionError" in done.stderr, done.stderr[-500:]


async def test_checks_run_side_by_side_within_the_cap() -> None:
    checker = ResponseChecker(parallel=2)
    exchanges = [Exchange(DOC, "/healthz", "GET", 200, JSON, b'{"ok": true}')] * 3
    got = await asyncio.gather(*(checker.check(e) for e in exchanges))
    assert [v.valid for v in got] == [True, True, True]
