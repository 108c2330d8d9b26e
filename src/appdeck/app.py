"""The composition root: builds every part from the settings and wires them together.

Nothing else constructs stores, buses or servers; tests use :meth:`Services.start` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from appdeck.auth import AllowAnonymous, Authenticator
from appdeck.events.bus import InProcessBus
from appdeck.protocol.registry import Registry
from appdeck.protocol.server import McpServer, ServerInfo
from appdeck.protocol.sessions import SessionManager
from appdeck.protocol.tasks import TaskLimits, TaskManager
from appdeck.settings import Settings
from appdeck.storage import Storage
from appdeck.transport.asgi import ASGIApp
from appdeck.transport.hub import StreamHub
from appdeck.transport.mcp_http import HttpSettings, McpHttpApp
from appdeck.transport.routes import Router, control_plane
from appdeck.transport.security import LOOPBACK_HOSTS, HostPolicy

log = logging.getLogger("appdeck")


@dataclass
class Services:
    settings: Settings
    storage: Storage
    hub: StreamHub
    server: McpServer
    registry: Registry
    authenticator: Authenticator
    instance_id: str
    port: int = 0
    _background: list[asyncio.Task[None]] = field(default_factory=list, repr=False)

    @classmethod
    async def start(
        cls, settings: Settings, *, authenticator: Authenticator | None = None, port: int = 0
    ) -> Services:
        storage = await Storage.open(settings.database())
        hub = StreamHub(storage.events, InProcessBus())
        registry = Registry()
        if settings.with_conformance_fixtures:
            from appdeck.fixtures.conformance import register as register_fixtures

            register_fixtures(registry)
        instance_id = secrets.token_hex(8)
        sessions = SessionManager(
            storage.sessions,
            idle_timeout=settings.session_idle_seconds,
            max_sessions=settings.max_sessions,
        )
        tasks = TaskManager(
            storage.tasks,
            hub,
            instance_id=instance_id,
            limits=TaskLimits(
                default_ttl_ms=settings.task_default_ttl_ms,
                max_ttl_ms=settings.task_max_ttl_ms,
                default_poll_ms=settings.task_poll_ms,
            ),
        )
        server = McpServer(
            registry=registry,
            sessions=sessions,
            tasks=tasks,
            outbox=hub,
            info=ServerInfo(version=settings.app_version),
            client_request_timeout=settings.client_request_timeout,
        )
        services = cls(
            settings=settings,
            storage=storage,
            hub=hub,
            server=server,
            registry=registry,
            authenticator=authenticator or AllowAnonymous(),
            instance_id=instance_id,
            port=port,
        )
        reconciled = await tasks.reconcile({})
        if reconciled:
            log.warning("reconciled %d task(s) left working by a previous process", reconciled)
        services._background.append(asyncio.create_task(services._sweep_forever(), name="sweeper"))
        if settings.with_conformance_fixtures:
            from appdeck.fixtures.conformance import tick_watched_resource

            ticker = tick_watched_resource(server.resources.updated)
            services._background.append(asyncio.create_task(ticker, name="watched-resource"))
        return services

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_seconds)
            try:
                await self.sweep()
            except Exception:
                log.exception("sweep failed")

    async def sweep(self) -> None:
        """Expire idle sessions and old tasks, trim the event log."""
        await self.server.sessions.sweep()
        await self.server.tasks.expire()
        await self.storage.events.trim(time.time() - self.settings.event_retention_seconds)

    async def stop(self) -> None:
        for task in self._background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.server.tasks.shutdown()
        with contextlib.suppress(Exception):
            await self.server.sessions.sweep()
        await self.storage.close()

    def policy(self) -> HostPolicy:
        s = self.settings
        hosts = {*LOOPBACK_HOSTS, s.host, *s.allowed_hosts}
        if s.public_url:
            hosts.add(urlsplit(s.public_url).hostname or "")
        return HostPolicy.build(hosts, s.allowed_origins)

    def asgi(self) -> ASGIApp:
        s = self.settings
        mcp = McpHttpApp(
            self.server,
            self.hub,
            self.authenticator,
            self.policy(),
            HttpSettings(
                max_body_bytes=s.max_body_bytes,
                keepalive_seconds=s.keepalive_seconds,
                retry_ms=s.sse_retry_ms,
            ),
        )

        async def health() -> dict[str, object]:
            return {"status": "ok", "version": s.app_version, "instance": self.instance_id}

        return Router(mcp, control_plane(health))
