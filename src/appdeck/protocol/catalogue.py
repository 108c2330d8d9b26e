"""What the resources and prompts features are built from (instead of the whole server)."""

from __future__ import annotations

from dataclasses import dataclass

from appdeck.protocol.call import ContextFactory
from appdeck.protocol.listen import ListenHub
from appdeck.protocol.ports import Outbox, Subscriptions
from appdeck.protocol.registry import Registry


@dataclass(frozen=True, slots=True)
class Catalogue:
    """The registry to serve from, a handler context per call, who follows which URI and
    hears of list changes, and the outbox that tells them; the stateless era's listen streams
    hear of the same changes through ``listen``."""

    registry: Registry
    context: ContextFactory
    subscriptions: Subscriptions
    outbox: Outbox
    listen: ListenHub | None = None
