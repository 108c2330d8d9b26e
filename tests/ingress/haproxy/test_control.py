"""The control plane's servers shared by the replicas of one host (``control.servers``)."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

import pytest

from appdeck.ingress.haproxy.control import ControlServers
from tests.ingress.upstreams import dead_address


def test_each_replica_adds_itself_and_leaves_the_others_until_it_unregisters(
    tmp_path: Path,
) -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as one,
        socket.create_server(("127.0.0.1", 0)) as two,
    ):
        first = f"127.0.0.1:{one.getsockname()[1]}"
        second = f"127.0.0.1:{two.getsockname()[1]}"
        a = ControlServers(tmp_path / "control.servers", (first,))
        b = ControlServers(tmp_path / "control.servers", (second,))
        a.register()
        b.register()
        assert a.all() == b.all() == sorted([first, second])
        b.unregister()
        assert a.all() == [first]  # what the next reload by the first replica lists


def test_a_dead_replicas_entry_and_lines_that_are_no_address_are_dropped(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as alive:
        own = f"127.0.0.1:{alive.getsockname()[1]}"
        path = tmp_path / "control.servers"
        path.write_text(f"{dead_address()}\nbackup evil:1 \n127.0.0.1:1 check\n")
        servers = ControlServers(path, (own,))
        assert servers.all() == sorted([own, path.read_text().splitlines()[0]])  # read: valid only
        servers.register()  # prunes: nobody listens at the dead one
        assert path.read_text() == f"{own}\n"


def test_an_own_server_that_is_no_address_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ip:port"):
        ControlServers(tmp_path / "control.servers", ("localhost:80 backup",))


def test_a_lock_its_holder_keeps_is_not_waited_on_and_the_own_servers_are_still_listed(
    tmp_path: Path,
) -> None:
    # The lock is taken in the event loop at every reload: a replica stopped inside it
    # stalled every other replica's loop. Now a short wait, then the change is skipped.
    with socket.create_server(("127.0.0.1", 0)) as alive:
        own = f"127.0.0.1:{alive.getsockname()[1]}"
        path = tmp_path / "control.servers"
        servers = ControlServers(path, (own,))
        held = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)  # another replica, stopped inside it
            servers.register()  # returns, raises nothing
            assert not path.exists()  # skipped
            assert servers.all() == [own]  # what a reload renders still names this replica
        finally:
            os.close(held)
        servers.register()
        assert path.read_text() == f"{own}\n"
