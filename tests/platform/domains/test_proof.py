"""The TXT lookup a custom domain's proof goes through, against a real DNS server
(pebble-challtestsrv), and what a refusal repeats of what it found."""

from __future__ import annotations

import asyncio
import socket

import pytest

from appdeck.platform.domains.proof import DnsTxtResolver, LookupFailed, challenge_name, mismatch
from tests.support.challtestsrv import challtestsrv


async def test_the_txt_values_at_a_name_are_read_from_the_configured_server() -> None:
    async with challtestsrv() as dns:
        resolver = DnsTxtResolver(dns.dns_address)
        name = challenge_name("shop.example.test")
        assert name == "_appdeck-challenge.shop.example.test"
        assert await resolver.txt(name) == []
        await dns.set_txt(name, "appdeck-token")
        assert await resolver.txt(name) == ["appdeck-token"]
        await dns.clear_txt(name)
        assert await resolver.txt(name) == []


async def test_a_server_that_never_answers_is_a_bounded_failure() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # bound, never read
        silent.bind(("127.0.0.1", 0))
        port = silent.getsockname()[1]
        resolver = DnsTxtResolver(f"127.0.0.1:{port}", timeout=0.5)
        async with asyncio.timeout(10):  # the lookup's own bound ends it long before
            with pytest.raises(LookupFailed) as raised:
                await resolver.txt("_appdeck-challenge.shop.example.test")
    assert "no answer within 0.5 s" in str(raised.value)


def test_a_mismatch_repeats_a_few_values_cut_and_printable() -> None:
    name = "_appdeck-challenge.shop.example.test"
    assert mismatch(name, []) == f"no TXT record at {name}"
    found = ["wrong", "\x1b[2J" + "y" * 500, "c", "d", "e"]
    text = mismatch(name, found)
    assert "'wrong'" in text
    assert "\x1b" not in text
    assert "and 2 more" in text
    assert len(text) < 300
