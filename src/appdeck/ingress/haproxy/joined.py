"""The edge (:mod:`.edge`, :mod:`.mirror`) joined to core's data plane (:mod:`.plane`).

    joined = JoinedEdge(EdgePaths(layout.directory / "edge"), options, plane.process.stats,
                        hosts=plane.hosts, challenges=plane.challenges,
                        certs=plane.certificates, gate=gate)
    plane.edge = joined            # its lines in every rendered config, its files prepared
    await plane.start(); ...       # the platform loads keys, TLS loads certificates
    await joined.start()           # only then: the mirror copies exactly what it is given

The plane renders :meth:`global_lines`, :meth:`http_rules` and :meth:`sections` into every
config, calls :meth:`prepare` before HAProxy starts or reloads, and :meth:`restarted` after
its watchdog started a dead HAProxy again (the mirror assumes nothing HAProxy held).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from appdeck.ingress.certs import Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.ingress.haproxy import edge
from appdeck.ingress.haproxy.control import ControlServers
from appdeck.ingress.haproxy.mirror import EdgeMirror
from appdeck.ingress.haproxy.runtime_api import RuntimeApi, RuntimeApiError
from appdeck.ingress.hosts import HostMap
from appdeck.ingress.keys import KeyGate

log = logging.getLogger("appdeck.ingress.haproxy")


class JoinedEdge:
    """The edge as the plane's ``EdgeHook``, and the mirror that keeps its maps in step."""

    def __init__(
        self,
        paths: edge.EdgePaths,
        options: edge.EdgeOptions,
        api: RuntimeApi,
        *,
        hosts: HostMap,
        challenges: Challenges,
        certs: Certificates,
        gate: KeyGate,
    ) -> None:
        self.paths = paths
        self.options = options
        self.api = api
        self.mirror = EdgeMirror(api, paths, hosts, challenges, certs, gate)
        self.control = ControlServers(paths.root / "control.servers", options.control_servers)
        """Every replica's control plane listener (replicas on a host share HAProxy)."""
        self.started = False
        self._global_lines = tuple(edge.global_lines(paths))
        self._http_rules = tuple(edge.http_rules(paths, options))
        """Worked out once: they follow from ``paths`` and ``options`` alone (frozen), and
        the plane renders them at every route change."""

    # -- what the plane renders and calls ----------------------------------------------------

    def global_lines(self) -> Sequence[str]:
        return self._global_lines

    def http_rules(self) -> Sequence[str]:
        return self._http_rules

    def sections(self, route_lines: Sequence[str], backend_lines: Sequence[str]) -> Sequence[str]:
        servers = self.control.all()
        return edge.extra_sections(self.paths, self.options, route_lines, backend_lines, servers)

    def prepare(self) -> None:
        edge.prepare(self.paths)
        self.control.register()

    async def restarted(self) -> None:
        """HAProxy was started again from the files: apply everything again, assume nothing."""
        if self.started:
            await self.mirror.resync()

    # -- the mirror --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start copying (call once hosts, challenges, certificates and keys are loaded)."""
        await self.mirror.start()
        self.started = True

    async def stop(self) -> None:
        """Stop the mirror; this replica's control plane listener leaves HAProxy (the file
        for the next reload, maintenance mode in the running one at once)."""
        self.started = False
        await self.mirror.stop()
        self.control.unregister()
        if self.options.control_host:
            for address in self.control.own:
                name = edge.control_server_name(address)
                for server in (name, f"{name}b"):
                    try:
                        await self.api.command(
                            f"set server {edge.CONTROL_BACKEND}/{server} state maint"
                        )
                    except (RuntimeApiError, OSError) as exc:  # HAProxy gone: nothing to do
                        log.debug("control server %s left as is: %s", server, exc)

    async def sync(self) -> None:
        """Returns once HAProxy holds the current state (read back); before :meth:`start`,
        nothing to wait for (HAProxy gets it all at start)."""
        if self.started:
            await self.mirror.sync()
