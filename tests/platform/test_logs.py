"""Reading logs: who may, and that no env value reaches a caller in a line unless an admin or
owner asks to reveal it. Real database and deploy engine (the engine test's rig); the log lines
come from an in-memory source."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from appdeck.auth.admin import IdentityAdmin
from appdeck.common.errors import NotFound, PermissionDenied
from appdeck.common.identity import Principal
from appdeck.platform.crypto import Sealer
from appdeck.platform.logs import MIN_MASKED, LogKind, LogQuery, LogService, Masker
from appdeck.runtime.driver import LogLine, LogPage
from appdeck.storage import Storage
from appdeck.storage.identity import IdentityStore
from tests.platform.deploy.test_engine import Rig, rig

__all__ = ["rig"]

SECRET = "s3cr3t-hunter2"


@dataclass
class MemoryLogs:
    """A log source over lists of lines, with the driver's paging and grep rules."""

    lines: dict[tuple[str, str], list[LogLine]] = field(default_factory=dict)
    greps: list[str | None] = field(default_factory=list)

    def write(self, release_id: str, kind: LogKind, *texts: str) -> None:
        log = self.lines.setdefault((release_id, kind), [])
        for text in texts:
            log.append(LogLine(time.time(), "stdout", text, len(log) + 1))

    async def logs(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
    ) -> LogPage:
        self.greps.append(grep)
        log = self.lines.get((release_id, kind), [])
        last = log[-1].seq if log else 0
        if cursor is None:
            found = [x for x in log if not grep or grep.lower() in x.text.lower()]
            return LogPage(found[-limit:], last)
        out: list[LogLine] = []
        for line in log:
            if line.seq <= cursor:
                continue
            if not grep or grep.lower() in line.text.lower():
                out.append(line)
                if len(out) >= limit:
                    return LogPage(out, line.seq)
        return LogPage(out, max(last, cursor))

    async def follow(
        self,
        release_id: str,
        kind: LogKind,
        cursor: int | None = None,
        limit: int = 200,
        grep: str | None = None,
        timeout_s: float = 10.0,
    ) -> LogPage:
        log = self.lines.get((release_id, kind), [])
        start = (log[-1].seq if log else 0) if cursor is None else cursor
        return await self.logs(release_id, kind, start, limit, grep)


@dataclass
class Logs:
    service: LogService
    source: MemoryLogs
    rig: Rig
    roles: dict[str, Principal]

    async def texts(self, role: str, **query: object) -> list[str]:
        page = await self.service.read(self.roles[role], self.rig.app_id, None, LogQuery(**query))
        return [line.text for line in page.lines]


@pytest.fixture
async def logs(rig: Rig, storage: Storage, tmp_path: Path) -> Logs:
    admin = IdentityAdmin(IdentityStore(storage.engine))
    roles = {"owner": rig.alice}
    for role in ("viewer", "developer", "admin"):
        user = await admin.create_user("acme", role, None)
        await rig.apps.grant(rig.alice, rig.app_id, role, role)
        roles[role] = Principal("acme", user.id, kind="oauth")
    await rig.env.set_vars(rig.alice, rig.app_id, {"SECRET": SECRET}, secret=True)
    source = MemoryLogs()
    sealer = Sealer.from_settings(None, tmp_path)  # the rig's key, in the same tmp dir
    service = LogService(rig.apps, rig.env, rig.deploys.store, source, sealer)
    return Logs(service, source, rig, roles)


def test_a_masker_hides_every_known_value_longest_first_in_one_pass() -> None:
    mask = Masker([("TOKEN", "abcd"), ("LONG", "abcdefgh"), ("SHORT", "xyz")])
    assert mask("abcdefgh abcd xyz") == "[masked:LONG] [masked:TOKEN] xyz"
    assert len("xyz") < MIN_MASKED  # too short to mask without mangling every line


def test_a_masker_hides_each_line_of_a_multi_line_value() -> None:
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBg\n-----END KEY-----"
    mask = Masker([("KEY", key)])
    assert mask("got MIIEvQIBADANBg from the file") == "got [masked:KEY] from the file"
    assert not Masker([("A", "1"), ("B", "")])


async def test_a_secret_printed_by_the_app_is_masked_for_every_role_by_default(
    logs: Logs,
) -> None:
    await logs.rig.deploy()
    release = f"{logs.rig.app_id}-1"
    logs.source.write(release, "runtime", f"SECRET={SECRET}", "listening on 8000")
    for role in ("viewer", "developer", "admin", "owner"):
        assert await logs.texts(role) == ["SECRET=[masked:SECRET]", "listening on 8000"], role


async def test_admins_and_owners_see_the_value_when_they_ask_to_reveal_it(logs: Logs) -> None:
    await logs.rig.deploy()
    logs.source.write(f"{logs.rig.app_id}-1", "build", f"token {SECRET}")
    for role in ("admin", "owner"):
        assert await logs.texts(role, kind="build", reveal=True) == [f"token {SECRET}"]
    for role in ("viewer", "developer"):
        with pytest.raises(PermissionDenied):
            await logs.texts(role, kind="build", reveal=True)


async def test_the_value_a_release_was_deployed_with_stays_masked_after_it_changes(
    logs: Logs,
) -> None:
    await logs.rig.deploy()
    await logs.rig.env.set_vars(
        logs.rig.alice, logs.rig.app_id, {"SECRET": "n3w-value"}, secret=True
    )
    logs.source.write(f"{logs.rig.app_id}-1", "runtime", f"old {SECRET}", "new n3w-value")
    assert await logs.texts("viewer") == ["old [masked:SECRET]", "new [masked:SECRET]"]


async def test_values_the_spec_itself_sets_are_not_masked(logs: Logs) -> None:
    await logs.rig.spec(env={"LOG_LEVEL": "verbose"})
    await logs.rig.deploy()
    logs.source.write(f"{logs.rig.app_id}-1", "runtime", "level verbose")
    assert await logs.texts("viewer") == ["level verbose"]


async def test_grep_never_matches_the_hidden_value(logs: Logs) -> None:
    await logs.rig.deploy()
    logs.source.write(f"{logs.rig.app_id}-1", "runtime", f"SECRET={SECRET}", "other line")
    for guess in ("SECRET=s", "hunter", SECRET):  # a guess, one character at a time
        assert await logs.texts("viewer", grep=guess) == [], guess
        assert await logs.texts("viewer", grep=guess, cursor=0) == [], guess
        assert await logs.texts("viewer", grep=guess, follow=True, cursor=0, wait_s=0) == []
    assert await logs.texts("viewer", grep="masked:secret") == ["SECRET=[masked:SECRET]"]
    assert set(logs.source.greps) == {None}  # the raw text was never filtered by the source
    assert await logs.texts("owner", grep="hunter", reveal=True) == [f"SECRET={SECRET}"]


async def test_paging_with_grep_after_a_cursor_misses_and_repeats_nothing(logs: Logs) -> None:
    await logs.rig.deploy()
    release = f"{logs.rig.app_id}-1"
    logs.source.write(release, "runtime", *(f"line {i} {SECRET}" for i in range(2500)))
    seen: list[str] = []
    cursor = 0
    for _ in range(100):
        page = await logs.service.read(
            logs.roles["viewer"],
            logs.rig.app_id,
            1,
            LogQuery(cursor=cursor, limit=700, grep="9 [masked"),
        )
        seen += [line.text for line in page.lines]
        if page.next_cursor == cursor:
            break
        cursor = page.next_cursor
    assert seen == [f"line {i} [masked:SECRET]" for i in range(2500) if i % 10 == 9]


async def test_a_caller_without_a_role_learns_nothing_about_the_logs(logs: Logs) -> None:
    await logs.rig.deploy()
    stranger = Principal("globex", "nobody", kind="oauth")
    with pytest.raises(NotFound):
        await logs.service.read(stranger, logs.rig.app_id, None, LogQuery())
    with pytest.raises(NotFound):
        await logs.service.read(logs.roles["viewer"], logs.rig.app_id, 99, LogQuery())
