"""The exceptions a shared backend raises when it cannot be reached, without importing it.

Replica mode talks to Redis through redis-py; the embedded default never does, and importing
redis-py (with the OpenTelemetry API it pulls in) is ~60 ms of every process start: the
server's, each command line's. Modules that catch Redis's failures (the transport's streams,
the rate limit, the broadcast) ask :func:`redis_errors` when a failure happens instead of
importing the client: until replica mode loads redis-py, no Redis error can be raised, and the
answer is an empty tuple (``except ():`` catches nothing).
"""

from __future__ import annotations

import sys


def redis_errors(*also: type[Exception]) -> tuple[type[Exception], ...]:
    """``(redis.exceptions.RedisError, *also)`` once redis-py is loaded, else ``also``."""
    module = sys.modules.get("redis.exceptions")
    if module is None:
        return also
    error: type[Exception] = module.RedisError
    return (error, *also)
