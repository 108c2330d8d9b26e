"""The server-process helper's report of a failed test: warnings and errors with their
tracebacks, not the request log around them."""

from __future__ import annotations

from pathlib import Path

from tests.support.appdeck_process import notable_lines

LOG = """\
2026-11-29T05:49:07.533918Z [info     ] tool call tool=list_apps outcome=ok [appdeck.activity]
2026-11-29T05:49:08.000000Z [warning  ] app 1: lost its lock (fence 2) [appdeck.deploy]
2026-11-29T05:49:09.000000Z [info     ] tool call tool=deploy_app outcome=ok [appdeck.activity]
2026-11-29T05:49:10.000000Z [error    ] could not reclaim deployment 1-2 [appdeck.deploy]
Traceback (most recent call last):
  File "x.py", line 1, in <module>
OSError: [Errno 39] Directory not empty
2026-11-29T05:49:11.000000Z [info     ] tool call tool=get_app outcome=ok [appdeck.activity]
"""


def test_the_notable_lines_are_the_warnings_and_errors_with_their_tracebacks(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.stderr"
    log.write_text(LOG)
    kept = notable_lines(log, 10).splitlines()
    assert [line.split(" ", 1)[1][:10] for line in kept if line.startswith("2026")] == [
        "[warning  ",
        "[error    ",
    ]
    assert kept[-1] == "OSError: [Errno 39] Directory not empty"
    assert "tool=get_app" not in "\n".join(kept)


def test_the_notable_lines_keep_only_the_last_ones_and_say_when_there_are_none(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.stderr"
    log.write_text(LOG)
    assert notable_lines(log, 1) == "OSError: [Errno 39] Directory not empty"
    quiet = tmp_path / "quiet.stderr"
    quiet.write_text(LOG.splitlines()[0] + "\n")
    assert notable_lines(quiet, 10) == "(nothing above info)"
    assert notable_lines(tmp_path / "missing", 10) == "(no log)"
