"""A small observable map: the data plane's state that the control plane writes (hostnames,
ACME challenges, certificates) and the data plane driver mirrors (the HAProxy driver copies
each change into HAProxy through its runtime API).

Listeners are called synchronously after every change, with the key that changed; a listener
must not block (the HAProxy driver queues the change and applies it on its own task).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger("appdeck.ingress")

V = TypeVar("V")
Listener = Callable[[str], None]


class Watched(Generic[V]):
    """``key → value`` with change listeners; thread-safe reads and writes."""

    def __init__(self) -> None:
        self._items: dict[str, V] = {}
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def on_change(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _changed(self, key: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(key)
            except Exception:  # one broken mirror must not stop the others
                log.exception("a data plane listener failed on %r", key)

    def _put(self, key: str, value: V) -> None:
        with self._lock:
            same = self._items.get(key) == value
            self._items[key] = value
        if not same:
            self._changed(key)

    def _drop(self, key: str) -> None:
        with self._lock:
            known = self._items.pop(key, None) is not None
        if known:
            self._changed(key)

    def get(self, key: str) -> V | None:
        with self._lock:
            return self._items.get(key)

    def items(self) -> dict[str, V]:
        """A copy of every entry."""
        with self._lock:
            return dict(self._items)

    def replace(self, items: dict[str, V]) -> None:
        """Make the map exactly ``items`` (a resync from the database); listeners hear each
        key that changed."""
        with self._lock:
            before = self._items
            self._items = dict(items)
        for key in set(before) | set(items):
            if before.get(key) != items.get(key):
                self._changed(key)
