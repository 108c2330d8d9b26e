"""Build and runtime logs: timestamped JSON lines, cursor paging, grep, follow, caps."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appdeck.common.errors import InvalidArgument, NotFound
from appdeck.runtime import LocalDriver, free_port
from appdeck.runtime.logfile import TRUNCATED_MARK, LineSplitter, LogWriter, seq_path
from appdeck.runtime.logs import read_page

from .conftest import PYTHON, eventually, http_get, make_spec, wait_healthy


async def test_runtime_logs_are_captured_with_timestamps_streams_and_instances(
    driver: LocalDriver,
) -> None:
    before = time.time()
    spec = make_spec()
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    await http_get(ref.port, "/fail")
    request = await driver.follow("12-1", "runtime", cursor=0, grep="GET /fail", timeout_s=5)
    assert request.lines[0].stream == "stderr"
    assert '"GET /fail HTTP/1.1" 500' in request.lines[0].text
    page = await driver.logs("12-1", "runtime", cursor=0)
    streams = {(line.stream, line.text.split(" ")[0]) for line in page.lines}
    assert ("system", "started") in streams
    assert ("stdout", "hello") in streams  # "hello v1 listening on ..."
    assert all(before <= line.ts <= time.time() for line in page.lines)
    assert all(line.instance == 0 for line in page.lines)
    seqs = [line.seq for line in page.lines]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert page.next_cursor == seqs[-1]


async def test_logs_page_by_cursor_filter_by_grep_and_tail_without_cursor(
    driver: LocalDriver,
) -> None:
    spec = make_spec(
        run_command="for i in $(seq 1 50); do echo out $i; echo err $i >&2; done; exec sleep 1000"
    )
    await driver.prepare(spec)
    await driver.launch(spec, 0, free_port())

    async def all_written() -> bool:
        page = await driver.logs("12-1", "runtime", grep="err 50")
        return bool(page.lines)

    await eventually(all_written, within=30.0)
    seen: list[str] = []
    cursor = 0
    for _ in range(100):
        page = await driver.logs("12-1", "runtime", cursor=cursor, limit=7)
        if not page.lines:
            break
        assert len(page.lines) <= 7
        seen.extend(line.text for line in page.lines)
        cursor = page.next_cursor
    assert [t for t in seen if t.startswith("out ")] == [f"out {i}" for i in range(1, 51)]
    assert len([t for t in seen if t.startswith("err ")]) == 50

    grepped = await driver.logs("12-1", "runtime", cursor=0, grep="ERR 4", limit=100)
    assert [line.text for line in grepped.lines] == ["err 4"] + [f"err {i}" for i in range(40, 50)]
    assert all(line.stream == "stderr" for line in grepped.lines)

    tail = await driver.logs("12-1", "runtime", limit=3)
    assert [line.text for line in tail.lines][-1] in ("out 50", "err 50")
    assert len(tail.lines) == 3
    assert tail.next_cursor == tail.lines[-1].seq
    grep_tail = await driver.logs("12-1", "runtime", limit=2, grep="out 1")
    assert [line.text for line in grep_tail.lines] == ["out 18", "out 19"]

    with pytest.raises(InvalidArgument):
        await driver.logs("12-1", "runtime", limit=0)
    with pytest.raises(NotFound):
        await driver.logs("77-1", "runtime")


async def test_follow_waits_for_new_lines_and_gives_up_after_its_timeout(
    driver: LocalDriver,
) -> None:
    spec = make_spec()
    await driver.prepare(spec)
    ref = await driver.launch(spec, 0, free_port())
    await wait_healthy(driver, ref)
    # Health checks log requests too: wait until the log is quiet.
    await asyncio.sleep(0.1)

    began = time.monotonic()
    quiet = await driver.follow("12-1", "runtime", grep="nothing like this", timeout_s=0.4)
    assert quiet.lines == []
    assert 0.3 <= time.monotonic() - began < 20  # gave up after its 0.4 s (loaded: margin)

    waiting = asyncio.create_task(
        driver.follow("12-1", "runtime", grep="/openapi.json", timeout_s=60)
    )
    await asyncio.sleep(0.2)
    assert not waiting.done()
    status, body = await http_get(ref.port, "/openapi.json")
    assert status == 200
    assert json.loads(body)["openapi"] == "3.1.0"
    page = await asyncio.wait_for(waiting, 90.0)
    assert len(page.lines) == 1
    assert "GET /openapi.json" in page.lines[0].text


async def test_long_lines_are_cut_and_a_log_over_its_cap_keeps_the_newest_lines(
    runtime_dir: Path,
) -> None:
    driver = LocalDriver(runtime_dir, log_max_bytes=64 * 1024)
    spec = make_spec(
        run_command=f"{PYTHON} -c \"print('x' * 20000); "
        "[print(f'line {i:05d} ' + 'y' * 60) for i in range(3000)]\"; exec sleep 1000"
    )
    try:
        await driver.prepare(spec)
        await driver.launch(spec, 0, free_port())

        async def done() -> bool:
            return bool((await driver.logs("12-1", "runtime", grep="line 02999")).lines)

        await eventually(done, within=10.0)
        log = driver.runtime_dir / "apps" / "12" / "releases" / "12-1" / "runtime.log"
        on_disk = log.stat().st_size + log.with_name("runtime.log.1").stat().st_size
        assert on_disk <= 64 * 1024 + 8 * 1024
        page = await driver.logs("12-1", "runtime", cursor=0, limit=10_000)
        texts = [line.text for line in page.lines if line.stream == "stdout"]
        assert texts[-1].startswith("line 02999")
        assert "line 00000" not in "".join(texts)  # rotated away with the long line
        numbers = [int(t.split()[1]) for t in texts]
        assert numbers == list(range(numbers[0], 3000))  # contiguous: the newest part
    finally:
        await driver.stop("12-1")
        await driver.detach()


def test_a_line_over_8_kib_is_truncated_and_marked() -> None:
    splitter = LineSplitter()
    lines = splitter.feed(b"a" * 5000) + splitter.feed(b"b" * 5000 + b"\nnext\npartial")
    assert lines[0] == "a" * 5000 + "b" * 3192 + TRUNCATED_MARK
    assert lines[1:] == ["next"]
    assert splitter.flush() == ["partial"]
    assert splitter.feed(b"\xff\xfeok\r\n") == ["\ufffd\ufffdok"]


def test_several_processes_writing_one_log_never_share_a_seq(tmp_path: Path) -> None:
    log = tmp_path / "runtime.log"
    script = (
        "import sys; from pathlib import Path;"
        "from appdeck.runtime.logfile import LogWriter;"
        "w = LogWriter(Path(sys.argv[1]), instance=int(sys.argv[2]), max_bytes=40000);"
        "[w.write([('stdout', f'{sys.argv[2]}:{i}')] * 3) for i in range(200)]"
    )
    writers = [subprocess.Popen([sys.executable, "-c", script, str(log), str(n)]) for n in range(3)]
    for writer in writers:
        assert writer.wait(timeout=30) == 0
    page = read_page(log, 0, 10_000, None)
    seqs = [line.seq for line in page.lines]
    assert seqs == sorted(set(seqs))
    assert seqs[-1] == 1800  # every number handed out once
    raw = log.read_bytes().splitlines()
    assert all(json.loads(line)["seq"] for line in raw)


def test_a_writer_recovers_after_a_torn_line_and_a_lost_seq_file(tmp_path: Path) -> None:
    log = tmp_path / "runtime.log"
    writer = LogWriter(log)
    writer.write([("stdout", "one"), ("stdout", "two")])
    writer.close()
    with log.open("ab") as handle:
        handle.write(b'{"seq":3,"ts":1.0,"str')  # a writer killed mid-line
    log.with_name("runtime.log.seq").unlink()
    again = LogWriter(log)
    again.write([("stderr", "three")])
    again.close()
    page = read_page(log, 0, 100, None)
    # The torn line is skipped; its number is not handed out again.
    assert [(line.seq, line.text) for line in page.lines] == [(1, "one"), (2, "two"), (4, "three")]


def test_a_writer_never_waits_long_for_a_lock_its_holder_keeps(tmp_path: Path) -> None:
    # A writer stopped inside the log's lock (a paused server) stalled every other writer
    # of the release: a server's event loop, a shim and the app printing through it. Now the
    # batch waits a bounded moment and is dropped, as on a write error; the next one goes in.
    log = tmp_path / "runtime.log"
    writer = LogWriter(log)
    writer.write([("stdout", "one")])
    held = os.open(seq_path(log), os.O_RDWR)  # another open file: another holder
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        writer.write([("stdout", "lost while the lock is held")])  # returns, raises nothing
    finally:
        os.close(held)
    writer.write([("stdout", "two")])
    writer.close()
    page = read_page(log, 0, 100, None)
    assert [line.text for line in page.lines] == ["one", "two"]
