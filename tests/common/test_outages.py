"""Redis's failures are caught without importing redis-py where replica mode is off."""

from __future__ import annotations

import subprocess
import sys

import redis.exceptions

from appdeck.common.outages import redis_errors


def test_once_redis_is_loaded_its_errors_are_caught_with_the_others_given() -> None:
    assert redis_errors() == (redis.exceptions.RedisError,)
    assert redis_errors(OSError, TimeoutError) == (
        redis.exceptions.RedisError,
        OSError,
        TimeoutError,
    )
    assert _caught(redis.exceptions.ConnectionError("down")) == "caught"
    assert _caught(ValueError("not an outage")) == "passed"


def _caught(error: Exception) -> str:
    try:
        try:
            raise error
        except redis_errors(OSError):
            return "caught"
    except ValueError:
        return "passed"
    return "neither"


def test_the_server_and_the_command_line_start_without_loading_redis() -> None:
    code = (
        "import sys; import appdeck.app, appdeck.cli, appdeck.cli.serve; "
        "from appdeck.common.outages import redis_errors; "
        "loaded = sorted(m for m in sys.modules if m == 'redis' or m.startswith('redis.')); "
        "assert not loaded, loaded; assert redis_errors(OSError) == (OSError,)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
