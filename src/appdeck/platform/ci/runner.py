"""Running an app's test command at a commit: in the same sandbox as the app's build.

A run is a build of a release of its own (release id ``<app>-ci<run>``): the runtime driver
copies the checkout into a fresh workspace inside the app's sandbox, as the app's uid, runs
the build steps the app's spec implies (the venv and ``pip install``, ``npm install``, the
build command) and then the test command, under the build's limits and network rule, with a
deadline; nothing it started outlives it. Its build log is the run's log: read back bounded,
with the app's env values masked and control characters dropped, then the workspace goes.
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from appdeck.common.errors import AppDeckError
from appdeck.model.release import AppSpec, Release
from appdeck.runtime.driver import BuildFailed, Driver

LOG_MAX_CHARS: Final = 256 * 1024
"""A run's kept log: its last this many characters (the end says why it failed)."""
LOG_PAGE: Final = 1000
LOG_MAX_PAGES: Final = 200
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class CIRelease(Release):
    """A release that only builds: the CI run ``run`` of its app."""

    run: int = 0

    @property
    def release_id(self) -> str:
        return f"{self.app_id}-ci{self.run}"


@dataclass(frozen=True, slots=True)
class Job:
    app_id: int
    app_name: str
    run: int
    spec: AppSpec
    env: Mapping[str, str]
    source: Path
    test_command: str
    timeout_s: float


@dataclass(frozen=True, slots=True)
class Outcome:
    state: str  # passed | failed | timed_out | error
    exit_code: int | None
    message: str
    log: str


class CIRunner(Protocol):
    async def run(self, job: Job, mask: Callable[[str], str]) -> Outcome: ...


def test_spec(spec: AppSpec, test_command: str, timeout_s: float) -> AppSpec:
    """The app's spec with the test command run after its build command, in one shell that
    stops at the first failure, within ``timeout_s`` for the whole build."""
    command = test_command if not spec.build_command else f"{spec.build_command}\n{test_command}"
    return dataclasses.replace(spec, build_command=f"set -e\n{command}", build_timeout_s=timeout_s)


class SandboxRunner:
    """Runs jobs through the runtime driver's build (sandboxed when the driver is)."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    async def run(self, job: Job, mask: Callable[[str], str]) -> Outcome:
        release = CIRelease(
            job.app_id,
            job.app_name,
            0,
            test_spec(job.spec, job.test_command, job.timeout_s),
            dict(job.env),
            "",
            job.source,
            run=job.run,
        )
        try:
            try:
                await self._driver.prepare(release, rebuild=True)
            except BuildFailed as exc:
                if exc.timed_out:
                    state, message = (
                        "timed_out",
                        f"the run did not finish within {job.timeout_s:g}s",
                    )
                else:
                    state, message = "failed", f"{exc.step} exited with code {exc.exit_code}"
                return Outcome(state, exc.exit_code, message, await self._log(release, mask))
            except AppDeckError as exc:  # the checkout could not be copied (too big, a link)
                return Outcome("error", None, exc.message, await self._log(release, mask))
            return Outcome("passed", 0, "the tests passed", await self._log(release, mask))
        finally:
            await self._driver.remove(release.release_id)

    async def _log(self, release: Release, mask: Callable[[str], str]) -> str:
        return await read_log(self._driver.logs, release.release_id, mask)


async def read_log(
    logs: Callable[..., Awaitable[object]], release_id: str, mask: Callable[[str], str]
) -> str:
    """The build log of ``release_id`` as text: masked, without control characters, its last
    :data:`LOG_MAX_CHARS` characters (with a note when cut)."""
    kept: deque[str] = deque()
    size = 0
    cut = False
    cursor = 0
    for _ in range(LOG_MAX_PAGES):
        page = await logs(release_id, "build", cursor=cursor, limit=LOG_PAGE)
        lines = getattr(page, "lines", [])
        for line in lines:
            text = _CONTROL.sub("", mask(str(line.text)))
            kept.append(text)
            size += len(text) + 1
            while size > LOG_MAX_CHARS and kept:
                size -= len(kept.popleft()) + 1
                cut = True
        if len(lines) < LOG_PAGE:
            break
        cursor = int(getattr(page, "next_cursor", cursor))
    else:
        cut = True
    text = "\n".join(kept)
    return (
        f"[earlier output cut: the last {LOG_MAX_CHARS} characters follow]\n{text}" if cut else text
    )
