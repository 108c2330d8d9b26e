"""Cancels carried to the replica that drives a deploy (``platform/deploy/cancels.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from appdeck.events.signals import LocalBroadcast
from appdeck.platform.deploy.cancels import CHANNEL, CancelRelay, decode, encode


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"app": "1", "number": 2}',
        b'{"app": 1, "number": true}',
        b'{"app": 1.5, "number": 2}',
        b'{"app": 1}',
        b'{"app": 1, "number": 2, "pad": "' + b"x" * 300 + b'"}',
    ],
)
def test_a_malformed_cancel_message_names_no_deployment(payload: bytes) -> None:
    assert decode(payload) is None


def test_a_cancel_message_names_its_app_and_deployment() -> None:
    assert decode(encode(7, 2**40)) == (7, 2**40)


async def test_the_replica_driving_the_deploy_cancels_it_and_the_others_ignore_it() -> None:
    broadcast = LocalBroadcast()
    loop = asyncio.get_running_loop()
    driven: dict[tuple[int, int], asyncio.Future[Any]] = {(1, 3): loop.create_future()}
    other: dict[tuple[int, int], asyncio.Future[Any]] = {(1, 2): loop.create_future()}
    driver, bystander, sender = CancelRelay(driven), CancelRelay(other), CancelRelay({})
    for relay in (driver, bystander, sender):
        await relay.attach(broadcast)
    assert sender.shared

    await sender.ask(1, 3)
    await broadcast.publish(CHANNEL, b"garbage")  # dropped, nothing cancelled

    assert driven[(1, 3)].cancelled()
    assert not other[(1, 2)].done()
    await driver.detach()


async def test_in_one_process_a_cancel_is_sent_nowhere() -> None:
    relay = CancelRelay({})
    assert not relay.shared
    await relay.ask(1, 1)  # no broadcast: nothing to do, no error
