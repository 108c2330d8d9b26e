"""Building a release for the deploy engine: every ``prepare`` the engine makes goes through
:func:`build`, so that a failed build's log tail never reaches a tool caller."""

from __future__ import annotations

from appdeck.platform.deploy.ports import BuildFailed, Driver, Release


async def build(driver: Driver, release: Release) -> None:
    """``driver.prepare(release)``; a :class:`BuildFailed` comes out without its
    ``log_tail``: the tail is app output (it may print its secrets, or instructions to an
    agent), which only tail_deploy_logs hands out, masked."""
    try:
        await driver.prepare(release)
    except BuildFailed as exc:
        raise BuildFailed(
            f"{exc.message}; read the build log (tail_deploy_logs with kind 'build')",
            release_id=exc.release_id,
            step=exc.step,
            exit_code=exc.exit_code,
            timed_out=exc.timed_out,
        ) from None
